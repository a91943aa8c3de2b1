// A modal confirmation built on <dialog>: focus starts on the safe choice,
// Escape or the safe button answers false. `danger` marks a choice that stops or
// removes something; a neutral one (switching a feature on) is a plain button.

import { h } from "./dom.js";

export function confirmDialog({ title, message, confirmLabel, cancelLabel = "Keep it", danger = true }) {
  return new Promise((resolve) => {
    const titleId = `dialog-title-${Math.random().toString(36).slice(2)}`;
    const keep = h("button", { type: "button", class: "button button--quiet", value: "cancel" }, cancelLabel);
    const confirm = h("button", { type: "button", class: danger ? "button button--danger" : "button", value: "confirm" }, confirmLabel);
    const dialog = h(
      "dialog",
      { class: "dialog", "aria-labelledby": titleId },
      h("h2", { id: titleId, class: "dialog__title" }, title),
      h("p", { class: "dialog__message" }, message),
      h("div", { class: "dialog__actions" }, keep, confirm),
    );
    const previous = document.activeElement;

    function finish(answer) {
      dialog.close();
      dialog.remove();
      if (previous instanceof HTMLElement && previous.isConnected) previous.focus();
      resolve(answer);
    }

    keep.addEventListener("click", () => finish(false));
    confirm.addEventListener("click", () => finish(true));
    dialog.addEventListener("cancel", (event) => {
      event.preventDefault();
      finish(false);
    });
    document.body.append(dialog);
    dialog.showModal();
    keep.focus();
  });
}
