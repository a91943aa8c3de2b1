// A form field: its label names the control, and its help text describes it
// (aria-describedby), so the name a screen reader gives the control is the label alone.
// A required field left empty says so below it when its form is checked (`checkFilled`),
// every such field at once; a field the server refused is marked invalid (aria-invalid)
// until it is edited.

import { h } from "./dom.js";

let nextId = 0;

const emptyErrors = new WeakMap(); // a required control -> {label, error}: what says it is empty

function describedBy(control, id) {
  const ids = (control.getAttribute("aria-describedby") ?? "").split(" ").filter(Boolean);
  control.setAttribute("aria-describedby", [id, ...ids].join(" "));
}

function notDescribedBy(control, id) {
  const ids = (control.getAttribute("aria-describedby") ?? "").split(" ").filter((known) => known && known !== id);
  control.setAttribute("aria-describedby", ids.join(" "));
}

export function field(label, control, hint) {
  nextId += 1;
  if (!control.id) control.id = `field-${nextId}`;
  const help = hint ? h("span", { class: "hint", id: `field-hint-${nextId}` }, hint) : null;
  if (help) describedBy(control, help.id);
  const empty = control.required ? h("p", { class: "form-error field__error", id: `field-error-${nextId}`, hidden: true }) : null;
  if (empty) {
    emptyErrors.set(control, { label, error: empty });
    // Edited: judged again at the next send. Before any check of its own (a length limit)
    // judges the new text, as a refusal's mark goes.
    control.addEventListener("input", () => showEmpty(control, false), { capture: true });
  }
  return h("div", { class: "field" }, h("label", { class: "field__label", for: control.id }, label), control, help, empty);
}

function showEmpty(control, empty) {
  const { label, error } = emptyErrors.get(control);
  if (!empty && error.hidden) return;
  error.textContent = empty ? `${label} must not be empty.` : "";
  error.hidden = !empty;
  if (empty) describedBy(control, error.id);
  else notDescribedBy(control, error.id);
  control.setAttribute("aria-invalid", empty ? "true" : "false");
}

// Each required field of `form` that is empty, or only spaces, says so below it, all at
// once, and focus goes to the first; answers whether every one is filled. The form sets
// `novalidate`: the browser's own check says one field at a time, and takes spaces as text.
// What is sent, the server still judges (`markRefusedField`).
export function checkFilled(form) {
  let first = null;
  for (const control of form.elements) {
    if (!emptyErrors.has(control)) continue;
    const empty = control.value.trim() === "";
    showEmpty(control, empty);
    if (empty) first ??= control;
  }
  first?.focus();
  return first === null;
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
