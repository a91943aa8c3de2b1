// A text field's limit, as the server judges it. No maxlength: a browser cuts a paste at
// it without a word, and counts UTF-16 code units, so it takes only 100 emoji where the
// server takes 200, and cuts between the parts of one (a family emoji left as half a
// family, an "é" typed as e + accent left as a bare "e"). A text over the limit is kept
// whole, said to be too long, and not sent. A long text shows its live count; a line (a
// title, a file name) says only when it is over.

import { h } from "./dom.js";
import { formatNumber } from "./format.js";

// Characters as the server counts them: code points, so an emoji is one, not two.
export function characterCount(text) {
  const pairs = text.match(/[\uD800-\uDBFF][\uDC00-\uDFFF]/g);
  return text.length - (pairs ? pairs.length : 0);
}

// What Python's str.strip() trims, as the services do to a line before they store it: its
// white space, which is not quite JavaScript's (trim() takes the BOM, U+FEFF, too, and
// leaves the information separators U+001C to U+001F and U+0085). The gateway counts a
// line as sent, blanks and all, so a page sends a line trimmed, as it counted it.
const SERVER_EDGES =
  /^[\t\n\v\f\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+|[\t\n\v\f\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+$/g;

export function serverTrimmed(text) {
  return text.replace(SERVER_EDGES, "");
}

let nextId = 0;

// `noun` names the text in the message ("The description"); `action` is what to do
// once it is short enough ("add the job"). `line`: a one-line field, counted trimmed
// (`serverTrimmed`, as it is sent); it shows no counter, only the message once it is over.
export function limitText(control, { max, noun, action, line = false }) {
  nextId += 1;
  const counter = line ? null : h("span", { class: "counter", id: `counter-${nextId}` });
  const warning = h("p", { class: "form-error", role: "alert", id: `counter-warning-${nextId}`, hidden: true });
  const described = (control.getAttribute("aria-describedby") ?? "").split(" ").filter(Boolean);
  control.setAttribute("aria-describedby", [...described, ...(counter ? [counter.id] : []), warning.id].join(" "));
  const counted = () => characterCount(line ? serverTrimmed(control.value) : control.value);

  function problem() {
    const count = counted();
    if (count <= max) return null;
    return (
      `${noun} is ${formatNumber(count)} characters, ${formatNumber(count - max)} over its limit of ` +
      `${formatNumber(max)}. Nothing was cut: shorten it, then ${action}.`
    );
  }

  function refresh() {
    const text = problem();
    if (counter) {
      counter.textContent = `${formatNumber(counted())} / ${formatNumber(max)} characters`;
      counter.classList.toggle("counter--over", Boolean(text));
    }
    control.setAttribute("aria-invalid", text ? "true" : "false");
    if ((warning.textContent || null) !== text) warning.textContent = text ?? "";
    warning.hidden = !text;
  }

  control.addEventListener("input", refresh);
  refresh();
  // A line's message alone: hidden, it takes no room under its field.
  const element = counter ? h("div", { class: "counted" }, counter, warning) : warning;
  return { element, refresh, problem };
}
