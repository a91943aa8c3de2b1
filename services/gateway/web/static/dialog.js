// A modal confirmation built on <dialog>: focus starts on the safe choice,
// Escape or the safe button answers false. `danger` marks a choice that stops or
// removes something; a neutral one (switching a feature on) is a plain button.
// `signal` aborts the question when its subject goes away while it is open (the
// analysis to cancel ends): the dialog then says `endedMessage`, offers only "Close",
// and answers false.

import { h } from "./dom.js";

export function confirmDialog({ title, message, confirmLabel, cancelLabel = "Keep it", danger = true, signal, endedMessage }) {
  return new Promise((resolve) => {
    const titleId = `dialog-title-${Math.random().toString(36).slice(2)}`;
    const keep = h("button", { type: "button", class: "button button--quiet", value: "cancel" }, cancelLabel);
    const confirm = h("button", { type: "button", class: danger ? "button button--danger" : "button", value: "confirm" }, confirmLabel);
    const text = h("p", { class: "dialog__message", role: "status" }, message);
    const dialog = h(
      "dialog",
      { class: "dialog", "aria-labelledby": titleId },
      h("h2", { id: titleId, class: "dialog__title" }, title),
      text,
      h("div", { class: "dialog__actions" }, keep, confirm),
    );
    const previous = document.activeElement;

    let done = false;

    function finish(answer) {
      if (done) return;
      done = true;
      signal?.removeEventListener("abort", ended);
      dialog.close();
      dialog.remove();
      if (previous instanceof HTMLElement && previous.isConnected) previous.focus();
      resolve(answer);
    }

    // The question is moot: say why, and leave only the way out (focus on it).
    function ended() {
      if (done) return;
      text.textContent = endedMessage ?? "This has already finished.";
      confirm.remove();
      keep.textContent = "Close";
      keep.focus();
    }

    keep.addEventListener("click", () => finish(false));
    confirm.addEventListener("click", () => finish(!signal?.aborted));
    dialog.addEventListener("cancel", (event) => {
      event.preventDefault();
      finish(false);
    });
    document.body.append(dialog);
    dialog.showModal();
    keep.focus();
    if (signal?.aborted) ended();
    else signal?.addEventListener("abort", ended);
  });
}
