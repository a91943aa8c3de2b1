// The result of an analysis (any registered task type), its progress and its
// cancel. Updated in place on every poll, so focus survives and the live region
// around it announces only what changed (a new state, a note, the result). While
// it runs, the answer's fields written so far show as they arrive (the draft: out
// of the live region's announcements, which would read every word).

import { h, replaceChildren } from "./dom.js";
import { TERMINAL_STATES, cancelCameTooLate, formatTime, isLive, stateLabel } from "./format.js";
import { actionsOf } from "./operations-view.js";
import { modelLabel, provenanceOf } from "./provenance.js";
import { task } from "./tasks.js";

export const TOO_LATE_NOTE = "The cancel came too late: the analysis had already finished.";

// A score as "82 / 100", or "Not scored" when the answer has none (absent or null).
export function scoreView(schema, value) {
  if (typeof value !== "number" || !Number.isFinite(value)) {
    return [h("strong", {}, `${schema.title ?? "Score"}: Not scored`), h("span", { class: "hint" }, " · There was nothing to compare.")];
  }
  return [h("strong", {}, `${schema.title ?? "Score"}: ${value}`), h("span", { class: "hint" }, ` / ${schema.maximum ?? 100}`)];
}

// The result, laid out by the task's answer schema: each integer is a score
// under its title, each string a paragraph, each non-empty array a titled list;
// then which model produced it.
function resultView(taskType, snapshot, operation) {
  const properties = task(taskType)?.answer?.properties ?? {};
  const result = snapshot.result;
  const fields = Object.entries(properties);
  // A score that may be left unscored is {anyOf: [{type: "integer", …}, {type: "null"}]}.
  const scoreSchema = (schema) => (schema.anyOf ? { ...schema.anyOf[0], title: schema.title } : schema);
  const scores = fields.filter(([, schema]) => scoreSchema(schema).type === "integer");
  const texts = fields.filter(([, schema]) => schema.type === "string");
  const lists = fields.filter(([name, schema]) => schema.type === "array" && (result[name] ?? []).length > 0);
  return h(
    "div",
    { class: "analysis__result" },
    scores.map(([name, schema]) => h("p", { class: "analysis__score" }, scoreView({ title: name, ...scoreSchema(schema) }, result[name]))),
    texts.filter(([name]) => result[name]).map(([name]) => h("p", {}, result[name])),
    lists.map(([name, schema]) =>
      h("div", { class: "analysis__list" }, h("h4", {}, schema.title ?? name), h("ul", {}, result[name].map((item) => h("li", {}, item)))),
    ),
    modelLabel(provenanceOf(snapshot, operation)),
    h("p", { class: "hint analysis__updated" }, `Updated ${formatTime(snapshot.updated_at)}.`),
  );
}

// The running attempt's answer so far, in the result's layout: each field once it has
// begun (a list item may still be growing). `partial` is what the gateway parsed.
function draftView(taskType, partial) {
  const properties = task(taskType)?.answer?.properties ?? {};
  const shown = [];
  for (const [name, schema] of Object.entries(properties)) {
    const value = partial[name];
    const title = schema.title ?? name;
    if (typeof value === "number") shown.push(h("p", { class: "analysis__score" }, h("strong", {}, `${title}: ${value}`)));
    else if (typeof value === "string" && value) shown.push(h("p", {}, value));
    else if (Array.isArray(value) && value.length) {
      const items = value.filter((item) => typeof item === "string" && item);
      shown.push(h("div", { class: "analysis__list" }, h("h4", {}, title), h("ul", {}, items.map((item) => h("li", {}, item)))));
    }
  }
  if (!shown.length) return null;
  return h("div", { class: "analysis__draft" }, h("p", { class: "hint" }, "Being written…"), shown);
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
  const draftSlot = h("div", { class: "analysis__draft-slot", "aria-live": "off" });
  let current = null;
  let resultKey = "";
  let draft = null;
  let draftKey = "";
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

  function updateResult(snapshot, operation) {
    const provenance = provenanceOf(snapshot, operation);
    const key = snapshot ? JSON.stringify([snapshot, provenance]) : "";
    if (key === resultKey) return;
    resultKey = key;
    replaceChildren(resultSlot, snapshot ? resultView(taskType, snapshot, operation) : null);
  }

  // Only a running operation shows a draft, and only its own attempt's (the gateway sends
  // the current attempt's whole text each time: a new attempt replaces, never appends).
  function updateDraft(operation) {
    const shown = operation?.state === "running" && draft?.partial ? draft : null;
    const key = shown ? JSON.stringify([operation.id, shown.attempt, shown.partial]) : "";
    if (key === draftKey) return;
    draftKey = key;
    replaceChildren(draftSlot, shown ? draftView(taskType, shown.partial) : null);
  }

  slot.append(draftSlot, resultSlot);

  return {
    // Show a GET of the task's resource (e.g. …/strategy-snapshot): {snapshot, operation}.
    render(answer) {
      current = answer.operation ?? null;
      draft = answer.draft ?? null;
      updateStatus(current);
      updateDraft(current);
      updateResult(answer.snapshot ?? null, current);
    },
    // Show a newer copy of the operation (e.g. the answer to a cancel), keeping the result;
    // with `newDraft` (an event of the tab's stream), its answer so far too.
    showOperation(operation, newDraft) {
      current = operation;
      if (newDraft !== undefined) draft = newDraft;
      updateStatus(operation);
      updateDraft(operation);
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
