// Bring one element a link pointed at (#job-…, #operation-…) into view and mark it,
// since the pages build their lists after the browser looked for the fragment.

export function highlight(element) {
  document.querySelectorAll(".is-highlighted").forEach((other) => other.classList.remove("is-highlighted"));
  element.classList.add("is-highlighted");
  if (!element.hasAttribute("tabindex")) element.setAttribute("tabindex", "-1");
  element.scrollIntoView({ block: "center" });
  element.focus({ preventScroll: true });
}
