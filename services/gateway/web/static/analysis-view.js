// The result of an analysis (any registered task type), its progress (or, before the
// model's first sign, that it waits for the model), its cancel and, once it was cancelled
// or failed, its retry. Updated in place on every poll, so
// focus survives and the live region around it announces only what changed (a note, the
// result). Its progress is told through the page's one announcer (`announce`): its start,
// each new phase, every PROGRESS_STEP %, its end; the status line itself stays quiet, or a
// screen reader would hear each change twice. While it runs, the answer's fields written so
// far show as they arrive (the draft: out of the live region's announcements, which would
// read every word). Each finished analysis is its own result, headed by when it was made and
// with what ("Previous result, 3 Dec 14:02, with cv.txt"): a result another run made
// than the one shown is labelled the previous one, so a cancelled or failed run never
// sits above an older result as if it were its own.

import { h, replaceChildren } from "./dom.js";
import { TERMINAL_STATES, cancelCameTooLate, isLive } from "./format.js";
import { actionsOf, cancelling, nextRunOf, shownState, stateClass, waitingForModel } from "./operations-view.js";
import { modelLabel } from "./provenance.js";
import { task } from "./tasks.js";

export const TOO_LATE_NOTE = "The cancel came too late: the analysis had already finished.";
// Progress is announced in steps this large: each percent would be spam.
export const PROGRESS_STEP = 25;

// A score as "82 / 100", or "Not scored" when the answer has none (absent or null).
export function scoreView(schema, value) {
  if (typeof value !== "number" || !Number.isFinite(value)) {
    return [h("strong", {}, `${schema.title ?? "Score"}: Not scored`), h("span", { class: "hint" }, " · There was nothing to compare.")];
  }
  return [h("strong", {}, `${schema.title ?? "Score"}: ${value}`), h("span", { class: "hint" }, ` / ${schema.maximum ?? 100}`)];
}

const whenFormat = new Intl.DateTimeFormat(undefined, { day: "numeric", month: "short", hour: "2-digit", minute: "2-digit" });

// "3 Dec 14:02" (in the reader's locale and time zone).
export function formatWhen(iso) {
  return iso ? whenFormat.format(new Date(iso)) : "";
}

// "with cv.txt", "without a CV", or "" for a task that takes no second reference.
export function madeWith(taskType, snapshot) {
  const context = task(taskType)?.context;
  if (!context) return "";
  if (!snapshot.context) return `without a ${context.label}`;
  return snapshot.context.name ? `with ${snapshot.context.name}` : `with a ${context.label} no longer listed`;
}

// "Previous result, 3 Dec 14:02, with cv.txt": `kind` is "Result", "Previous result" or
// "Earlier result".
export function resultHeading(kind, taskType, snapshot) {
  return [kind, formatWhen(snapshot.created_at ?? snapshot.updated_at), madeWith(taskType, snapshot)].filter(Boolean).join(", ");
}

// The heading's nodes: the name it was made with (user text) isolated in its own direction,
// so an Arabic file name neither reads backwards nor drags the words around it along.
function headingNodes(kind, taskType, snapshot) {
  const heading = resultHeading(kind, taskType, snapshot);
  const name = snapshot.context?.name;
  if (!name || !task(taskType)?.context || !heading.endsWith(`with ${name}`)) return [heading];
  return [heading.slice(0, heading.length - name.length), h("span", { dir: "auto" }, name)];
}

function setHeading(element, kind, taskType, snapshot) {
  if (element.textContent !== resultHeading(kind, taskType, snapshot)) replaceChildren(element, headingNodes(kind, taskType, snapshot));
}

// The result, laid out by the task's answer schema under its heading: each integer is
// a score under its title, each string a paragraph, each non-empty array a titled
// list; then which model produced it (the result's own record of it).
function resultView(taskType, snapshot, kind) {
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
    { class: resultClass(kind) },
    h("h4", { class: "analysis__result-heading" }, headingNodes(kind, taskType, snapshot)),
    scores.map(([name, schema]) => h("p", { class: "analysis__score" }, scoreView({ title: name, ...scoreSchema(schema) }, result[name]))),
    // The model's words: in the language it wrote them, an Arabic answer right to left.
    texts.filter(([name]) => result[name]).map(([name]) => h("p", { dir: "auto" }, result[name])),
    lists.map(([name, schema]) =>
      h("div", { class: "analysis__list" }, h("h4", {}, schema.title ?? name), h("ul", {}, result[name].map((item) => h("li", { dir: "auto" }, item)))),
    ),
    modelLabel(snapshot.provenance ?? null),
  );
}

function resultClass(kind) {
  return kind === "Result" ? "analysis__result" : `analysis__result analysis__result--${kind === "Previous result" ? "previous" : "earlier"}`;
}

// Whether the result shown is the shown run's own; else it is the previous one (a newer
// run is queued, running, cancelled or failed), and says so.
function ownResult(snapshot, operation) {
  return !operation || snapshot.operation_id === operation.id;
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
    else if (typeof value === "string" && value) shown.push(h("p", { dir: "auto" }, value));
    else if (Array.isArray(value) && value.length) {
      const items = value.filter((item) => typeof item === "string" && item);
      shown.push(h("div", { class: "analysis__list" }, h("h4", {}, title), h("ul", {}, items.map((item) => h("li", { dir: "auto" }, item)))));
    }
  }
  if (!shown.length) return null;
  return h("div", { class: "analysis__draft" }, h("p", { class: "hint" }, "Being written…"), shown);
}

// A succeeded analysis shows only its result, unless a cancel came too late.
function showsStatus(operation) {
  return Boolean(operation) && (operation.state !== "succeeded" || cancelCameTooLate(operation));
}

// Beside the state: when waiting work runs next (as on /operations), and which attempt once
// one failed: "retrying: attempt 2 of 3" while a retry runs, "next try …, attempt 2 of 3"
// while it waits for its turn. "" says nothing.
function whenOf(operation) {
  if (cancelling(operation)) return "";
  const next = nextRunOf(operation);
  const of = (attempt) => `attempt ${attempt} of ${operation.max_attempts}`;
  if (operation.state === "waiting_for_retry") return [next, of(operation.attempt + 1)].filter(Boolean).join(", ");
  if (operation.state === "running" && operation.attempt > 1) return `retrying: ${of(operation.attempt)}`;
  return next;
}

// "cancel" (the button), "cancelling" (the same button, inert), "retry" (after a cancel
// or a failure, as on /operations), or "" (none).
function actionMode(operation) {
  if (cancelling(operation)) return "cancelling";
  const actions = actionsOf(operation);
  if (actions.includes("cancel")) return "cancel";
  return actions.includes("retry") ? "retry" : "";
}

// The phase of a run as the announcer says it: "queued", "waiting for the model",
// "running", "50% done", "waiting to retry", "cancelling", "finished", "failed", …
function phaseOf(operation) {
  if (operation.state === "succeeded") return "finished";
  if (operation.state === "running" && !waitingForModel(operation) && !cancelling(operation)) {
    const step = Math.floor(operation.progress_percent / PROGRESS_STEP) * PROGRESS_STEP;
    return step > 0 ? `${step}% done` : "running";
  }
  return shownState(operation).toLowerCase();
}

function setText(element, text) {
  if (element.textContent !== text) element.textContent = text;
}

// One analysis shown in `slot` (a live region). `onCancel(operation)` cancels it,
// `onRetry(operation)` runs it again (a promise: the button asks nothing more until it
// settles); focus moves to `focusFallback()` when the focused button goes away. `name`
// ("Strategy snapshot for Engineer at Acme") is in the accessible name of each control,
// which every card of the page repeats, and in what `announce(text)` is given to say.
export function createAnalysisView(slot, taskType, { onCancel, onRetry, focusFallback, announce, name = "" } = {}) {
  const named = (label) => (name ? `${label}: ${name}` : label);
  const state = h("span", { class: "state" });
  const when = h("span", { class: "analysis__when", hidden: true }); // "scheduled for …" (as on /operations), the attempt
  const progressSlot = h("span", { class: "analysis__progress" });
  const note = h("p", { class: "analysis__note", hidden: true });
  const actionError = h("p", { class: "form-error analysis__action-error", role: "alert", hidden: true }); // a failed cancel, beside it
  const actions = h("span", { class: "analysis__actions" });
  const status = h(
    "div",
    { class: "analysis__status", "aria-live": "off" }, // told through `announce` instead
    state,
    when,
    progressSlot,
    actions,
    h("a", { href: "/operations", "aria-label": named("See it in your operations") }, "See it in your operations"),
  );
  const resultSlot = h("div", { class: "analysis__result-slot" });
  const earlierSlot = h("div", { class: "analysis__earlier-slot" });
  const draftSlot = h("div", { class: "analysis__draft-slot", "aria-live": "off" });
  let current = null;
  let resultKey = "";
  let resultKind = "";
  let draft = null;
  let draftKey = "";
  let mode = "";
  let shownSnapshot = null;
  let spoken; // {id, phase} of the run last told of; undefined before the first look

  // A run started, or one moved to another phase: said once. The first look says nothing
  // (nothing changed in front of the reader), nor does a move within a phase.
  function tellChange(operation) {
    const before = spoken;
    spoken = operation ? { id: operation.id, phase: phaseOf(operation) } : null;
    if (before === undefined || !spoken) return;
    if (before?.id !== spoken.id) {
      announce?.(`${name}: ${TERMINAL_STATES.has(operation.state) ? spoken.phase : "started"}.`);
    } else if (before.phase !== spoken.phase) {
      announce?.(`${name}: ${spoken.phase}.`);
    }
  }

  function updateProgress(operation) {
    const bar = progressSlot.querySelector("progress");
    if (TERMINAL_STATES.has(operation.state) || waitingForModel(operation)) {
      replaceChildren(progressSlot);
    } else if (!bar) {
      replaceChildren(
        progressSlot,
        h("progress", { max: 100, value: operation.progress_percent, "aria-label": named("Analysis progress") }, `${operation.progress_percent}%`),
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

  // One retry per intent: the second click of a double click, while the first one's
  // request is on its way, asks nothing (aria-disabled keeps the button's focus).
  function retryButton() {
    return h(
      "button",
      {
        type: "button",
        class: "button analysis__retry",
        "aria-label": named("Retry analysis"),
        onclick: async (event) => {
          const button = event.currentTarget;
          if (button.getAttribute("aria-disabled") === "true" || !current) return;
          button.setAttribute("aria-disabled", "true");
          try {
            await onRetry?.(current);
          } finally {
            button.removeAttribute("aria-disabled");
          }
        },
      },
      "Retry analysis",
    );
  }

  // The button keeps its element from "cancel" to "cancelling" so focus stays on it.
  function updateActions(operation) {
    const next = actionMode(operation);
    if (next === mode) return;
    if (!next) {
      clearActions();
      return;
    }
    if (next === "retry" || mode === "retry") clearActions();
    mode = next;
    if (next === "retry") {
      actions.append(retryButton());
      return;
    }
    let button = actions.querySelector("button");
    if (!button) {
      button = cancelButton();
      actions.append(button);
    }
    const label = next === "cancelling" ? "Cancelling…" : "Cancel analysis";
    if (next === "cancelling") button.setAttribute("aria-disabled", "true");
    else button.removeAttribute("aria-disabled");
    setText(button, label);
    button.setAttribute("aria-label", named(label));
  }

  function updateStatus(operation) {
    tellChange(operation);
    if (!showsStatus(operation)) {
      clearActions();
      status.remove();
      actionError.remove();
      note.remove();
      return;
    }
    setText(state, shownState(operation));
    if (state.className !== stateClass(operation)) state.className = stateClass(operation);
    const next = whenOf(operation);
    setText(when, next);
    when.hidden = !next;
    updateProgress(operation);
    updateActions(operation);
    const text = cancelCameTooLate(operation) ? TOO_LATE_NOTE : "";
    setText(note, text);
    note.hidden = !text;
    if (!status.isConnected) slot.prepend(status, actionError, note);
  }

  // The same result that became the previous one (a new run started) is relabelled in
  // place: put in again, the live region would read all of it aloud once more.
  function updateResult(snapshot, operation) {
    const kind = snapshot && ownResult(snapshot, operation) ? "Result" : "Previous result";
    const key = snapshot ? JSON.stringify(snapshot) : "";
    shownSnapshot = snapshot;
    if (key === resultKey) {
      const shown = resultSlot.firstElementChild;
      if (shown && kind !== resultKind) {
        shown.className = resultClass(kind);
        setHeading(shown.querySelector(".analysis__result-heading"), kind, taskType, snapshot);
      }
    } else {
      replaceChildren(resultSlot, snapshot ? resultView(taskType, snapshot, kind) : null);
    }
    resultKey = key;
    resultKind = kind;
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

  slot.append(earlierSlot, draftSlot, resultSlot);

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
      updateResult(shownSnapshot, operation); // a new run makes the shown result the previous one
    },
    // Say beside the cancel button why a cancel failed ("" says nothing).
    showActionError(text) {
      setText(actionError, text);
      actionError.hidden = !text;
    },
    // Show a past run's own result (GET /api/operations/{id}/result, e.g. "View result" on
    // /operations) above the rest, until hidden; none when it is the result shown already.
    // Answers the element that shows it.
    showEarlier(result) {
      if (shownSnapshot?.operation_id === result.operation_id) {
        replaceChildren(earlierSlot);
        return resultSlot;
      }
      const hidden = () => {
        replaceChildren(earlierSlot);
        focusFallback?.()?.focus(); // the button went with it
      };
      const hide = h("button", { type: "button", class: "button button--quiet", "aria-label": named("Hide this earlier result"), onclick: hidden }, "Hide this earlier result");
      replaceChildren(earlierSlot, h("section", { class: "analysis__earlier", "aria-label": "Earlier result" }, resultView(taskType, result, "Earlier result"), hide));
      return earlierSlot;
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
