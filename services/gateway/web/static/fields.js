// A form field: its label names the control, and its help text describes it
// (aria-describedby), so the name a screen reader gives the control is the label alone.
// A field the server refused is marked invalid (aria-invalid) until it is edited.

import { h } from "./dom.js";

let nextId = 0;

function describedBy(control, id) {
  const ids = (control.getAttribute("aria-describedby") ?? "").split(" ").filter(Boolean);
  control.setAttribute("aria-describedby", [id, ...ids].join(" "));
}

export function field(label, control, hint) {
  nextId += 1;
  if (!control.id) control.id = `field-${nextId}`;
  const help = hint ? h("span", { class: "hint", id: `field-hint-${nextId}` }, hint) : null;
  if (help) describedBy(control, help.id);
  return h("div", { class: "field" }, h("label", { class: "field__label", for: control.id }, label), control, help);
}

// The control of `form` that a refusal (an ApiError) names, marked invalid and focused,
// so its message is not the only thing that says which field is wrong. Editing it clears
// the mark, before any check of its own (a length limit) judges it again, and calls
// `edited()` (the form drops the refusal's message: it was about the text before).
export function markRefusedField(form, failure, edited = () => {}) {
  const control = failure.field ? form.elements.namedItem(failure.field) : null;
  if (!(control instanceof HTMLElement)) return;
  control.setAttribute("aria-invalid", "true");
  const cleared = () => {
    control.setAttribute("aria-invalid", "false");
    edited();
  };
  control.addEventListener("input", cleared, { once: true, capture: true });
  control.focus();
}
