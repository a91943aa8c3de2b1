// A text field's live count against the server's limit. No maxlength: a browser
// cuts a paste at it without a word. A text over the limit is kept whole, said to
// be too long, and not sent.

import { h } from "./dom.js";
import { formatNumber } from "./format.js";

// Characters as the server counts them: code points, so an emoji is one, not two.
export function characterCount(text) {
  const pairs = text.match(/[\uD800-\uDBFF][\uDC00-\uDFFF]/g);
  return text.length - (pairs ? pairs.length : 0);
}

let nextId = 0;

// `noun` names the text in the message ("The description"); `action` is what to do
// once it is short enough ("add the job").
export function limitText(control, { max, noun, action }) {
  nextId += 1;
  const counter = h("span", { class: "counter", id: `counter-${nextId}` });
  const warning = h("p", { class: "form-error", role: "alert", id: `counter-warning-${nextId}`, hidden: true });
  control.setAttribute("aria-describedby", `${counter.id} ${warning.id}`);

  function problem() {
    const count = characterCount(control.value);
    if (count <= max) return null;
    return (
      `${noun} is ${formatNumber(count)} characters, ${formatNumber(count - max)} over its limit of ` +
      `${formatNumber(max)}. Nothing was cut: shorten it, then ${action}.`
    );
  }

  function refresh() {
    const text = problem();
    counter.textContent = `${formatNumber(characterCount(control.value))} / ${formatNumber(max)} characters`;
    counter.classList.toggle("counter--over", Boolean(text));
    control.setAttribute("aria-invalid", text ? "true" : "false");
    if ((warning.textContent || null) !== text) warning.textContent = text ?? "";
    warning.hidden = !text;
  }

  control.addEventListener("input", refresh);
  refresh();
  return { element: h("div", { class: "counted" }, counter, warning), refresh, problem };
}
