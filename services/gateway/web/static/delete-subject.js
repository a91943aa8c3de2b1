// Deleting a job or a CV from its card on /jobs (ADR 60). Asked first, as a cancel is:
// focus starts on "Keep it", and Escape keeps it. The server deletes the row and every
// analysis result made from it. Deleted, or found gone already (404: another tab deleted
// it), the card leaves the list, a line above the list says so, and focus moves to the
// next card's title (the one before it for the last card, the list's heading once the
// list is empty). While an analysis that uses it has not finished the delete is refused
// (409 analysis_active): the card says so calmly, names that analysis and offers to
// cancel it, after which the delete can be asked again; once that analysis ends (the tab's
// event stream or its long-poll tells it) the card says the delete can go ahead. Any
// other failure shows beside the button, and nothing is lost. A card whose job or CV the
// page finds gone another way (a start answered 404) leaves in the same words.

import { api, del, post } from "./api.js";
import { confirmDialog } from "./dialog.js";
import { h, replaceChildren } from "./dom.js";
import { createFollower } from "./follow.js";
import { TERMINAL_STATES } from "./format.js";
import { LIVE_OPERATION } from "./live.js";
import { actionsOf, operationAnchor, operationName } from "./operations-view.js";
import { collectionOf, forgetSubject, kindLabel, subjectName } from "./subjects.js";

// `headings`: the id of each kind's list heading ({job: "jobs-heading", …}), where focus
// goes once its list is empty. `onGone(kind, id)`: the page forgets the row (its choices,
// its polls), called after its card has left the list.
export function subjectDeleter({ headings, onGone }) {
  const said = new Map(); // list element -> the status line above it

  // The line above `list` that says what became of a deleted card; made before it is
  // needed, so a screen reader hears what is written into it.
  function statusOf(list) {
    if (!said.has(list)) {
      const status = h("p", { class: "hint item-status", role: "status" });
      list.before(status);
      said.set(list, status);
    }
    return said.get(list);
  }

  // The card (`item`, its <li>) leaves; focus, if it was in the card, goes to the title of a
  // card still there, else to the heading.
  function gone(item, kind, id, message) {
    const list = item.parentElement;
    const next = item.nextElementSibling ?? item.previousElementSibling;
    const hadFocus = item.contains(document.activeElement);
    statusOf(list).textContent = message;
    item.remove();
    forgetSubject(kind, id);
    onGone(kind, id);
    if (hadFocus) focusOn(next?.querySelector("h3") ?? document.getElementById(headings[kind]));
  }

  // Found deleted already (404: another tab, the API): by a delete, or by a start on its card.
  function alreadyDeleted(item, kind, id, name) {
    gone(item, kind, id, `${name} had already been deleted.`);
  }

  // The analysis that stands in a delete's way ended: `ended(operation)` once, unless
  // `stop()` came first. The tab's event stream tells it, or its long-poll, which answers
  // at once if it moved since `operation` was read (the stream may have told it already).
  function watchEnd(operation, ended) {
    let done = false;
    const follower = createFollower({ onMove: () => {}, onEnd: end, onFail: () => {} });
    function end(seen) {
      if (done) return;
      stop();
      ended(seen);
    }
    function heard(event) {
      const seen = event.detail?.operation;
      if (seen?.id === operation.id && TERMINAL_STATES.has(seen.state)) end(seen);
    }
    function stop() {
      done = true;
      window.removeEventListener(LIVE_OPERATION, heard);
      follower.stopAll();
    }
    window.addEventListener(LIVE_OPERATION, heard);
    follower.follow(operation);
    return stop;
  }

  // A card: its Delete button, and beside it what went wrong or what stands in the way.
  function control(kind, id, name) {
    const label = kindLabel(kind); // "job", "CV"
    const button = h("button", { type: "button", class: "button button--quiet", "aria-label": `Delete ${label}: ${name}` }, "Delete");
    const error = h("p", { class: "form-error", role: "alert", hidden: true });
    const blocker = h("div", { class: "notice item__blocker", role: "status", hidden: true });
    const box = h("div", { class: "item__delete" }, button, error, blocker);
    let sending = false;
    let unwatch = () => {}; // stops watching the analysis the blocker names

    function showError(message) {
      error.textContent = message;
      error.hidden = !message;
    }

    function showBlocker(...content) {
      unwatch();
      unwatch = () => {};
      const hadFocus = blocker.contains(document.activeElement);
      replaceChildren(blocker, ...content);
      blocker.hidden = content.length === 0;
      if (hadFocus) button.focus(); // its Cancel went: the delete is the next step
    }

    // The blocker names `operation` until it ends; then it says the delete can go ahead.
    function untilEnd(operation, analysis) {
      unwatch = watchEnd(operation, (ended) => {
        const how = ended.state === "cancelled" ? "is cancelled" : "has ended";
        showBlocker(h("p", {}, `${analysis} ${how}: you can delete the ${label} now.`));
      });
    }

    button.addEventListener("click", async () => {
      if (sending) return;
      statusOf(box.closest("li").parentElement);
      const confirmed = await confirmDialog({
        title: `Delete this ${label}?`,
        message: `Delete ${name}? This also deletes every analysis result made from it.`,
        confirmLabel: `Delete ${label}`,
      });
      if (!confirmed) return;
      // One request at a time: aria-disabled says it is busy and keeps its focus.
      sending = true;
      button.setAttribute("aria-disabled", "true");
      try {
        await del(`${collectionOf(kind)}/${encodeURIComponent(id)}`);
        showBlocker();
        gone(box.closest("li"), kind, id, `${name} was deleted, with every analysis result made from it.`);
      } catch (failure) {
        if (failure.status === 404) {
          showBlocker();
          alreadyDeleted(box.closest("li"), kind, id, name);
        } else if (failure.code === "analysis_active") {
          showError("");
          await showInUse(failure);
        } else {
          showBlocker();
          showError(`${name} could not be deleted. ${failure.message}`);
        }
      } finally {
        sending = false;
        button.removeAttribute("aria-disabled");
      }
    });

    // The server's sentence says what to do ("…is still running; cancel it first, then
    // delete the job"); the analysis it names is read to name it and offer its cancel.
    async function showInUse(failure) {
      const operation = failure.operationId ? await api(`/api/operations/${encodeURIComponent(failure.operationId)}`).catch(() => null) : null;
      if (!operation) {
        showBlocker(h("p", {}, failure.message));
        return;
      }
      const analysis = operationName(operation, await subjectName(operation.subject));
      if (TERMINAL_STATES.has(operation.state)) {
        showBlocker(h("p", {}, `${analysis} has ended: you can delete the ${label} now.`));
        return;
      }
      const cancel = actionsOf(operation).includes("cancel")
        ? h("button", { type: "button", class: "button button--quiet", "aria-label": `Cancel ${analysis}`, onclick: () => cancelAnalysis(operation, analysis) }, "Cancel the analysis")
        : null;
      showBlocker(
        h("p", {}, failure.message),
        h("p", {}, "The analysis: ", h("a", { href: `/operations#${operationAnchor(operation.id)}`, dir: "auto" }, analysis)),
        cancel,
      );
      untilEnd(operation, analysis);
    }

    // The same cancel as the card's own: asked first. Focus then goes back to Delete,
    // the next step, whatever came of it.
    async function cancelAnalysis(operation, analysis) {
      const confirmed = await confirmDialog({
        title: "Cancel this analysis?",
        message: `${analysis} will stop. An analysis that is already running stops at its next checkpoint.`,
        confirmLabel: "Stop analysis",
        cancelLabel: "Keep running",
      });
      if (!confirmed) {
        if (!box.contains(document.activeElement)) button.focus(); // it ended meanwhile: its Cancel went
        return;
      }
      try {
        const updated = await post(`/api/operations/${encodeURIComponent(operation.id)}/cancel`);
        showError("");
        const over = TERMINAL_STATES.has(updated.state);
        showBlocker(
          h(
            "p",
            {},
            over
              ? `${analysis} is cancelled: you can delete the ${label} now.`
              : `Cancel requested: ${analysis} stops at its next checkpoint. Delete the ${label} once it has stopped.`,
          ),
        );
        if (!over) untilEnd(updated, analysis);
      } catch (failure) {
        if (failure.status !== 409) {
          showError(`The analysis could not be cancelled. ${failure.message}`);
          return;
        }
        showError("");
        showBlocker(h("p", {}, `${analysis} had already finished: you can delete the ${label} now.`));
      }
      button.focus();
    }

    return box;
  }

  // `prepare(list)` makes the line above `list` before a card of it can leave.
  return { control, alreadyDeleted, prepare: statusOf };
}

// A title or heading takes focus from a script only (tabindex -1), never from Tab.
function focusOn(element) {
  if (!element) return;
  if (!element.hasAttribute("tabindex")) element.setAttribute("tabindex", "-1");
  element.focus();
}
