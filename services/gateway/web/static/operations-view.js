// One operation as a card, updated in place so focus and scroll survive each poll.
// Its subject shows by name (the job's title and company, the CV's filename) when
// the page could read it from the workspace, "A deleted job" when it is gone, else by its
// reference.

import { h, replaceChildren } from "./dom.js";
import { TERMINAL_STATES, cancelCameTooLate, formatTime, stateLabel, subjectLabel, taskLabel } from "./format.js";
import { usageLine } from "./provenance.js";
import { kindLabel, shownName, wasDeleted } from "./subjects.js";
import { task } from "./tasks.js";

const CANCELLABLE = new Set(["queued", "running", "waiting_for_retry", "waiting_for_external_fallback"]);
const RETRYABLE = new Set(["failed", "cancelled"]);

export const TOO_LATE_NOTE = "The cancel came too late: the work had already finished.";

export function actionsOf(operation) {
  const actions = [];
  if (CANCELLABLE.has(operation.state) && !operation.cancel_requested) actions.push("cancel");
  if (RETRYABLE.has(operation.state) && !wasDeleted(operation.subject)) actions.push("retry"); // its subject is gone: admission would refuse it
  return actions;
}

export function cancelling(operation) {
  return operation.cancel_requested && !TERMINAL_STATES.has(operation.state);
}

// An analysis (a registered task type: each is run by a model) running with no sign of the
// model yet: each run starts at 0 % and moves at the model's first sign (its reading of the
// prompt, the answer's first piece), so this is the worker waiting for the model, which may
// be down: the worker then asks it again and waits for it, within the attempt's bounds, and
// the attempt is retried after a delay. Said as that wait, not as a bar at 0 % that looks
// like a run that stalled. A producer's task type says nothing of a model: it stays "Running".
export function waitingForModel(operation) {
  return Boolean(task(operation.task_type)) && operation.state === "running" && operation.progress_percent === 0 && !cancelling(operation);
}

export function shownState(operation) {
  return waitingForModel(operation) ? "Waiting for the model" : stateLabel(operation);
}

export function stateClass(operation) {
  if (cancelling(operation)) return "state state--cancelling";
  return `state state--${waitingForModel(operation) ? "waiting_for_model" : operation.state}`;
}

// When waiting work runs next: "next try 3 Dec 2025, 14:05" (after a failed attempt),
// "scheduled for …" (started for a later time), else "". /jobs says it on its cards too.
export function nextRunOf(operation) {
  if (operation.state === "waiting_for_retry" && operation.next_attempt_at) return `next try ${formatTime(operation.next_attempt_at)}`;
  if (operation.state === "queued" && scheduled(operation)) return `scheduled for ${formatTime(operation.not_before)}`;
  return "";
}

// Started for a later time. A retry is not claimed before it was asked for either (its
// not_before is the moment of the retry, ADR 65), but it was not scheduled: "scheduled for
// <the time you clicked Retry>" misread it.
function scheduled(operation) {
  return Boolean(operation.not_before) && Date.parse(operation.not_before) > Date.parse(operation.updated_at);
}

// "Attempt 2 of 3"; with no attempt yet (a retry starts counting again), that it has not
// started, or never did (cancelled while queued): "Attempt 0" reads as a count gone wrong.
function attemptOf(operation) {
  if (operation.attempt > 0) return `Attempt ${operation.attempt} of ${operation.max_attempts}`;
  if (TERMINAL_STATES.has(operation.state)) return "Never started";
  const allowed = operation.max_attempts === 1 ? "1 attempt" : `${operation.max_attempts} attempts`;
  return `Not started yet (up to ${allowed})`;
}

function metaLine(operation) {
  const parts = [attemptOf(operation)];
  const next = nextRunOf(operation);
  if (next) parts.push(next);
  if (operation.finished_at) parts.push(`finished ${formatTime(operation.finished_at)}`);
  else if (operation.started_at) parts.push(`started ${formatTime(operation.started_at)}`);
  else parts.push(`created ${formatTime(operation.created_at)}`);
  return parts.join(" · ");
}

// Running work shows its bar (once the model showed a sign of it); waiting work only once
// it has made progress.
function showsProgress(operation) {
  if (TERMINAL_STATES.has(operation.state) || waitingForModel(operation)) return false;
  return operation.state === "running" || operation.progress_percent > 0;
}

function progressOf(operation, name) {
  if (!showsProgress(operation)) return null;
  const percent = operation.progress_percent;
  return h(
    "div",
    { class: "progress" },
    h("progress", { max: 100, value: percent, "aria-label": `Progress of ${name}` }, `${percent}%`),
    h("span", { class: "progress__value" }, `${percent}%`),
  );
}

function noteOf(operation) {
  if (cancelling(operation)) {
    return h("p", { class: "op__note" }, "Cancel requested: the work stops at its next checkpoint.");
  }
  if (cancelCameTooLate(operation)) {
    return h("p", { class: "op__note op__note--late" }, TOO_LATE_NOTE);
  }
  return null;
}

// The second click of a double click (`detail` 2: the browser counts clicks in one spot) is
// no new intent: the first one's answer may have put another action under the pointer (a
// Retry answered in time shows Cancel in its place, and the second click asked to cancel;
// a "Show more" answered in time loaded a second page).
export function once(act) {
  return (event) => {
    if (event.detail > 1) return;
    act();
  };
}

function buttons(operation, name, handlers) {
  return actionsOf(operation).map((action) =>
    action === "cancel"
      ? h(
          "button",
          { type: "button", class: "button button--quiet", "aria-label": `Cancel ${name}`, dataset: { action: "cancel" }, onclick: once(() => handlers.cancel(operation)) },
          "Cancel",
        )
      : h(
          "button",
          { type: "button", class: "button", "aria-label": `Retry ${name}`, dataset: { action: "retry" }, onclick: once(() => handlers.retry(operation)) },
          "Retry",
        ),
  );
}

// Registered tasks publish their result on the jobs page, next to their subject; the
// link names the operation, so a past run opens its own result, not the newest. A deleted
// subject's results went with it: none to open.
export function resultHref(operation) {
  const known = task(operation.task_type);
  if (!known || operation.state !== "succeeded" || !operation.subject?.id || wasDeleted(operation.subject)) return null;
  return `/jobs?result=${encodeURIComponent(operation.id)}#${known.subject.name}-${encodeURIComponent(operation.subject.id)}`;
}

// Named after its operation: a list of links all called "View result" tells nothing apart.
function resultLink(operation, fullName) {
  const href = resultHref(operation);
  return href ? h("a", { class: "op__result", href, "aria-label": `View result: ${fullName}` }, "View result") : null;
}

// "Strategy snapshot for Platform engineer at Acme" (or "… for job job-42").
export function operationName(operation, subjectName = null) {
  const name = taskLabel(operation.task_type);
  const subject = subjectLabel(operation.subject, subjectName);
  return subject ? `${name} for ${subject}` : name;
}

export function operationAnchor(operationId) {
  return `operation-${operationId}`;
}

function subjectLine(operation, subjectName) {
  const kind = kindLabel(operation.subject?.type);
  if (wasDeleted(operation.subject)) return h("span", { class: "op__subject-deleted" }, `A deleted ${kind}`);
  if (subjectName) {
    return [
      h("span", { class: "op__subject-type" }, `${kind.charAt(0).toUpperCase()}${kind.slice(1)}:`),
      " ",
      shownName("strong", { class: "op__subject-name" }, subjectName), // user text: its own direction
    ];
  }
  return [
    h("span", { class: "op__subject-type" }, operation.subject?.type || "subject"),
    " ",
    h("code", { class: "op__subject-id" }, operation.subject?.id ?? ""),
  ];
}

export function createCard(operation) {
  const card = h("li", { class: "op", id: operationAnchor(operation.id), dataset: { id: operation.id } });
  card.append(
    h(
      "div",
      { class: "op__head" },
      h("h3", { class: "op__title", tabindex: "-1" }),
      h("span", { class: "state" }),
    ),
    h("p", { class: "op__subject" }),
    h("div", { class: "op__progress" }),
    h("p", { class: "op__meta" }),
    h("p", { class: "op__usage", hidden: true }),
    h("div", { class: "op__note-slot" }),
    h("p", { class: "op__error", role: "alert", hidden: true }),
    h("div", { class: "op__actions" }),
  );
  return card;
}

export function updateCard(card, operation, handlers, subjectName = null) {
  const name = taskLabel(operation.task_type);
  const fullName = operationName(operation, subjectName);
  const previous = card.dataset.signature ?? "";
  const signature = `${operation.state}|${operation.cancel_requested}|${actionsOf(operation).join(",")}|${fullName}`;

  // Ten cards headed "Strategy snapshot" tell nothing apart: each heading names its subject
  // once the page knows it (user text: set as text, never parsed). Read, not shown: the
  // subject's line right below shows it already, wrapped as a long name needs.
  const title = card.querySelector(".op__title");
  if (title.textContent !== (subjectName ? `${name}: ${subjectName}` : name)) {
    const subject = subjectName ? h("span", { class: "visually-hidden" }, `: ${subjectName}`) : null;
    replaceChildren(title, name, subject);
  }
  const state = card.querySelector(".state");
  state.textContent = shownState(operation);
  state.className = stateClass(operation);
  card.dataset.state = operation.state;
  replaceChildren(card.querySelector(".op__subject"), subjectLine(operation, subjectName), resultLink(operation, fullName));
  card.querySelector(".op__meta").textContent = metaLine(operation);
  const usage = card.querySelector(".op__usage");
  usage.textContent = usageLine(operation);
  usage.hidden = !usage.textContent;

  const slot = card.querySelector(".op__progress");
  const bar = slot.querySelector("progress");
  if (bar && showsProgress(operation)) {
    bar.value = operation.progress_percent;
    bar.textContent = `${operation.progress_percent}%`;
    slot.querySelector(".progress__value").textContent = `${operation.progress_percent}%`;
  } else {
    replaceChildren(slot, progressOf(operation, fullName));
  }

  if (signature !== previous) {
    card.dataset.signature = signature;
    replaceChildren(card.querySelector(".op__note-slot"), noteOf(operation));
    const actions = card.querySelector(".op__actions");
    const hadFocus = actions.contains(document.activeElement);
    replaceChildren(actions, buttons(operation, fullName, handlers));
    if (hadFocus) focusTarget(card).focus(); // the focused button went: not to the page
  }
}

// Where focus goes when the focused button of a card goes away (its operation ended, or
// a dialog closed after it did): the card's next action, else its result, else its heading.
export function focusTarget(card) {
  return card.querySelector(".op__actions button") ?? card.querySelector(".op__result") ?? card.querySelector(".op__title");
}

export function showCardError(card, message) {
  const error = card.querySelector(".op__error");
  error.textContent = message;
  error.hidden = !message;
}
