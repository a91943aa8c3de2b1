// A modal confirmation built on <dialog>: focus starts on the safe choice,
// Escape or the safe button answers false. `danger` marks a choice that stops or
// removes something; a neutral one (switching a feature on) is a plain button.
// `signal` aborts the question when its subject goes away while it is open (the
// analysis to cancel ends): the dialog then says `endedMessage`, offers only "Close",
// and answers false. Closed, it gives focus back to what had it, or, when that went
// away meanwhile (the Cancel button of what ended), to `focusFallback()`. Tab and
// Shift+Tab go round its buttons: the page behind is inert, and focus never leaves
// for the document itself.

import { h } from "./dom.js";

export function confirmDialog({ title, message, confirmLabel, cancelLabel = "Keep it", danger = true, signal, endedMessage, focusFallback }) {
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
      const back = previous instanceof HTMLElement && previous.isConnected ? previous : focusFallback?.();
      back?.focus();
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
    dialog.addEventListener("keydown", (event) => keepFocusIn(dialog, event));
    document.body.append(dialog);
    dialog.showModal();
    keep.focus();
    if (signal?.aborted) ended();
    else signal?.addEventListener("abort", ended);
  });
}

// Tab from the dialog's last button to its first, Shift+Tab from the first to the last: a
// modal <dialog> alone lets focus leave the document past its ends.
function keepFocusIn(dialog, event) {
  if (event.key !== "Tab") return;
  const buttons = [...dialog.querySelectorAll("button")];
  const [first, last] = [buttons[0], buttons.at(-1)];
  if (document.activeElement !== (event.shiftKey ? first : last)) return;
  event.preventDefault();
  (event.shiftKey ? last : first).focus();
}

// The cancel dialogs of a page (/jobs, /operations), at most one open per `key` (an
// analysis, an operation): `ended(key)` tells the one open for it that what it would
// cancel has ended, and it says so instead of offering a cancel that would fail.
export function cancelDialogs() {
  const open = new Map(); // key -> AbortController of the dialog open for it
  return {
    async confirm(key, { name, ...question }) {
      const ended = new AbortController();
      open.set(key, ended);
      try {
        return await confirmDialog({
          cancelLabel: "Keep running",
          endedMessage: `${name} has already finished: there is nothing left to stop.`,
          ...question,
          signal: ended.signal,
        });
      } finally {
        if (open.get(key) === ended) open.delete(key);
      }
    },
    ended(key) {
      open.get(key)?.abort();
    },
  };
}
