// A form field: its label names the control, and its help text describes it
// (aria-describedby), so the name a screen reader gives the control is the label alone.

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
