// The result of an analysis (any registered task type), its progress and its
// cancel. Updated in place on every poll, so focus survives and the live region
// around it announces only what changed (a new state, a note, the result).

import { h, replaceChildren } from "./dom.js";
import { TERMINAL_STATES, cancelCameTooLate, formatTime, isLive, stateLabel } from "./format.js";
import { actionsOf } from "./operations-view.js";
import { task } from "./tasks.js";

export const TOO_LATE_NOTE = "The cancel came too late: the analysis had already finished.";

// The result, laid out by the task's answer schema: each integer is a score
// under its title, each string a paragraph, each non-empty array a titled list.
function resultView(taskType, snapshot) {
  const properties = task(taskType)?.answer?.properties ?? {};
  const result = snapshot.result;
  const fields = Object.entries(properties);
  const scores = fields.filter(([, schema]) => schema.type === "integer");
  const texts = fields.filter(([, schema]) => schema.type === "string");
  const lists = fields.filter(([name, schema]) => schema.type === "array" && (result[name] ?? []).length > 0);
  return h(
    "div",
    { class: "analysis__result" },
    scores.map(([name, schema]) =>
      h(
        "p",
        { class: "analysis__score" },
        h("strong", {}, `${schema.title ?? name}: ${result[name]}`),
        h("span", { class: "hint" }, ` / ${schema.maximum ?? 100} · updated ${formatTime(snapshot.updated_at)}`),
      ),
    ),
    texts.map(([name]) => h("p", {}, result[name])),
    lists.map(([name, schema]) =>
      h("div", { class: "analysis__list" }, h("h4", {}, schema.title ?? name), h("ul", {}, result[name].map((item) => h("li", {}, item)))),
    ),
  );
}

// A succeeded analysis shows only its result, unless a cancel came too late.
function showsStatus(operation) {
  return Boolean(operation) && (operation.state !== "succeeded" || cancelCameTooLate(operation));
}

function cancelling(operation) {
  return operation.cancel_requested && !TERMINAL_STATES.has(operation.state);
}

function stateClass(operation) {
  return `state state--${cancelling(operation) ? "cancelling" : operation.state}`;
}

// "cancel" (the button), "cancelling" (the same button, inert), or "" (none).
function cancelMode(operation) {
  if (cancelling(operation)) return "cancelling";
  return actionsOf(operation).includes("cancel") ? "cancel" : "";
}

function setText(element, text) {
  if (element.textContent !== text) element.textContent = text;
}

// One analysis shown in `slot` (a live region). `onCancel(operation)` cancels it;
// focus moves to `focusFallback()` when the focused cancel button goes away.
export function createAnalysisView(slot, taskType, { onCancel, focusFallback } = {}) {
  const state = h("span", { class: "state" });
  const progressSlot = h("span", { class: "analysis__progress" });
  const note = h("p", { class: "analysis__note", hidden: true });
  const actions = h("span", { class: "analysis__actions" });
  const status = h(
    "div",
    { class: "analysis__status" },
    state,
    progressSlot,
    actions,
    h("a", { href: "/operations" }, "See it in your operations"),
  );
  const resultSlot = h("div", { class: "analysis__result-slot" });
  let current = null;
  let resultKey = "";
  let mode = "";

  function updateProgress(operation) {
    const bar = progressSlot.querySelector("progress");
    if (TERMINAL_STATES.has(operation.state)) {
      replaceChildren(progressSlot);
    } else if (!bar) {
      replaceChildren(
        progressSlot,
        h("progress", { max: 100, value: operation.progress_percent, "aria-label": "Analysis progress" }, `${operation.progress_percent}%`),
      );
    } else if (bar.value !== operation.progress_percent) {
      bar.value = operation.progress_percent;
    }
  }

  function cancelButton() {
    return h(
      "button",
      {
        type: "button",
        class: "button button--quiet analysis__cancel",
        onclick: (event) => {
          if (event.currentTarget.getAttribute("aria-disabled") === "true" || !current) return;
          onCancel?.(current);
        },
      },
      "Cancel analysis",
    );
  }

  function clearActions() {
    mode = "";
    const hadFocus = actions.contains(document.activeElement);
    replaceChildren(actions);
    if (hadFocus) focusFallback?.()?.focus();
  }

  // The button keeps its element from "cancel" to "cancelling" so focus stays on it.
  function updateActions(operation) {
    const next = cancelMode(operation);
    if (next === mode) return;
    if (!next) {
      clearActions();
      return;
    }
    mode = next;
    let button = actions.querySelector("button");
    if (!button) {
      button = cancelButton();
      actions.append(button);
    }
    if (next === "cancelling") {
      button.setAttribute("aria-disabled", "true");
      setText(button, "Cancelling…");
    } else {
      button.removeAttribute("aria-disabled");
      setText(button, "Cancel analysis");
    }
  }

  function updateStatus(operation) {
    if (!showsStatus(operation)) {
      clearActions();
      status.remove();
      note.remove();
      return;
    }
    setText(state, stateLabel(operation));
    if (state.className !== stateClass(operation)) state.className = stateClass(operation);
    updateProgress(operation);
    updateActions(operation);
    const text = cancelCameTooLate(operation) ? TOO_LATE_NOTE : "";
    setText(note, text);
    note.hidden = !text;
    if (!status.isConnected) slot.prepend(status, note);
  }

  function updateResult(snapshot) {
    const key = snapshot ? JSON.stringify(snapshot) : "";
    if (key === resultKey) return;
    resultKey = key;
    replaceChildren(resultSlot, snapshot ? resultView(taskType, snapshot) : null);
  }

  slot.append(resultSlot);

  return {
    // Show a GET of the task's resource (e.g. …/strategy-snapshot): {snapshot, operation}.
    render(answer) {
      current = answer.operation ?? null;
      updateStatus(current);
      updateResult(answer.snapshot ?? null);
    },
    // Show a newer copy of the operation (e.g. the answer to a cancel), keeping the result.
    showOperation(operation) {
      current = operation;
      updateStatus(operation);
    },
  };
}

export function isActive(answer) {
  return Boolean(answer.operation && !TERMINAL_STATES.has(answer.operation.state));
}

// Polled fast while it is live (queued, running, or stopping for a cancel).
export function isLiveAnswer(answer) {
  return isLive(answer.operation);
}
