// /jobs: the caller's job postings and CVs, their AI settings, and AI analyses:
// every registered task type (tasks.js) on the subjects it works on, e.g. a
// strategy snapshot for a job (optionally against a CV); watch its progress,
// cancel it, and read the result. The tab's event stream (live.js) shows each
// analysis move the moment it commits, its answer as it is written, and a run
// started in another tab; without the stream, a running analysis is followed by
// the long-poll (follow.js) and the rest are polled, only while shown and only
// those still running: every half second while one is live, else every few seconds.
// A run's second reference (the CV of a snapshot, the job of a CV review) is kept
// for the next run; /jobs#job-<id> scrolls to and highlights that job, and
// /jobs?result=<operation id>#job-<id> ("View result" on a past run) shows that run's
// own result there too. A cancelled or failed analysis is retried on its card, as on
// /operations; a cancel dialog whose analysis ends while it is open says so.
// A read of an analysis that failed (a dropped connection, a gateway restarting) is tried
// again, later each time, and at once when the stream reconnects; until it succeeds the
// page says its updates are paused. Jobs load a page at a time ("Show more jobs"); every
// CV is read (each is offered as the CV to compare with), and shown a step at a time.
// Each job and CV is deleted from its card (delete-subject.js), and forgotten here; one
// deleted elsewhere leaves its card when a start finds it gone, and the lists are read
// again whenever the page is shown again (the event stream tells of operations only),
// conditionally: a page unchanged since its last read costs a 304 and no body.
// An error on a card lasts while it is true (`showCardError`). The forms check their
// fields before sending, and say what they added. One polite announcer tells a screen
// reader how each analysis gets on (analysis-view.js says when).

import { api, post, put, revalidate } from "../api.js";
import { cancelDialogs } from "../dialog.js";
import { h, replaceChildren } from "../dom.js";
import { createAnalysisView, isActive, isLiveAnswer } from "../analysis-view.js";
import { subjectDeleter } from "../delete-subject.js";
import { budgetChanged, notificationsChanged } from "../events.js";
import { checkFilled, field, markRefusedField } from "../fields.js";
import { createFollower } from "../follow.js";
import { TERMINAL_STATES, formatNumber, formatTime, isLive } from "../format.js";
import { highlight } from "../highlight.js";
import { LIVE_OPENED, LIVE_OPERATION, liveOpen } from "../live.js";
import { visiblePoller } from "../poller.js";
import { mountAiSettings, refusalInReadersTime } from "../settings-view.js";
import { TASKS, task as taskNamed, taskPath, tasksFor } from "../tasks.js";
import { limitText, serverTrimmed } from "../text-limit.js";

export const ANALYSIS_POLL_MS = 2000;
export const ANALYSIS_LIVE_POLL_MS = 500;
// A failed read of an analysis is tried again after READ_RETRY_FIRST_MS, twice as long
// after each further failure, at most READ_RETRY_MAX_MS apart; meanwhile no poll reads it.
export const READ_RETRY_FIRST_MS = 1000;
export const READ_RETRY_MAX_MS = 30000;
// Jobs come with their description (up to 20,000 characters each): JOBS_PAGE at a time.
export const JOBS_PAGE = 50;
// CVs come without their text, so all of them are read, a page of PAGE_SIZE_MAX (the API's
// largest, model/bounds.py PAGE_SIZE_RANGE) at a time; the list shows CVS_STEP at a time.
export const CVS_STEP = 50;
const PAGE_SIZE_MAX = 100;
// The server's bounds (model/bounds.py), in characters (code points) as it counts them.
const JOB_TITLE_MAX = 200;
const JOB_COMPANY_MAX = 200;
const JOB_DESCRIPTION_MAX = 20000;
const ATTACHMENT_FILENAME_MAX = 255;
const CV_TEXT_MAX = 200000;

function formError() {
  return h("p", { class: "form-error", role: "alert", hidden: true });
}

// Whether any of the [control, limit] pairs is over its limit: focus goes to the first,
// whose message under it says what is wrong, and nothing is sent.
function overLimit(limited) {
  const over = limited.find(([, limit]) => limit.problem());
  over?.[0].focus();
  return Boolean(over);
}

const shownErrors = new WeakMap(); // a form's error element -> the error it shows
const unreached = new Set(); // the error elements that say the server could not be reached

// An error that the server could not be reached goes once the page hears from it again
// (`reached`): by then it is no longer true.
function showFormError(element, error) {
  element.textContent = error ? error.message : "";
  element.hidden = !error;
  shownErrors.set(element, error);
  if (error?.status === 0) unreached.add(element);
  else unreached.delete(element);
}

// A refusal's message goes once its field is edited, unless a newer one has replaced it.
function clearFormError(element, error) {
  if (shownErrors.get(element) === error) showFormError(element, null);
}

// `send()` on the form's submit, at most once at a time: the second click of a double
// click (or Enter pressed again) while the first request is on its way would add the
// job or CV twice. The button says it is busy (aria-disabled keeps its focus, where
// `disabled` would drop it to the page).
function onSubmitOnce(form, send) {
  const button = form.querySelector("button[type=submit]");
  let sending = false;
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (sending) return;
    sending = true;
    button.setAttribute("aria-disabled", "true");
    try {
      await send();
    } finally {
      sending = false;
      button.removeAttribute("aria-disabled");
    }
  });
}

// The second reference of a task's last run from this browser, per task resource:
// operations keep it to themselves, so the page remembers the choice it sent.
const CHOICE_PREFIX = "durable-ops:context:";

function lastChoice(path) {
  try {
    return window.localStorage.getItem(CHOICE_PREFIX + path);
  } catch {
    return null;
  }
}

function keepChoice(path, value) {
  try {
    window.localStorage.setItem(CHOICE_PREFIX + path, value);
  } catch {
    // Storage is off (private mode): the choice lasts while the page is open.
  }
}

export function mount(main) {
  const settingsSlot = h("div", { class: "settings" });
  const jobList = h("ol", { class: "items", "aria-label": "Your jobs" });
  const cvList = h("ol", { class: "items", "aria-label": "Your CVs" });
  const analyses = new Map(); // path -> {view, active, live, looks, over, operationId}
  const choices = new Map(); // path -> the second reference chosen here: kept across redraws
  const rows = { job: [], attachment: [] }; // the caller's jobs (loaded so far) and CVs (all), by subject kind
  let jobsNext = ""; // the token of the jobs not loaded yet, "" when none
  let cvsShown = CVS_STEP;
  const cancels = cancelDialogs(); // keyed by analysis entry
  const linkNotice = h("p", { class: "notice", role: "alert", hidden: true }); // a link's result not shown
  const deleter = subjectDeleter({ headings: { job: "jobs-heading", attachment: "cvs-heading" }, onGone: forget });
  const readTrouble = h("div", { class: "banner", role: "alert", hidden: true }); // reads failing: updates paused
  const announcer = h("p", { class: "visually-hidden", role: "status" }); // the analyses' progress, for a screen reader
  const moreJobs = h("button", { type: "button", class: "button button--quiet", hidden: true }, "Show more jobs");
  const moreJobsError = formError();
  const moreCvs = h("button", { type: "button", class: "button button--quiet", hidden: true }, "Show more CVs");
  let plan = null; // the caller's plan ("pro", "free") once the AI settings are read
  let planNotes = 0; // ids of the cards' plan notes

  replaceChildren(
    main,
    h("div", { class: "page-head" }, h("h1", {}, "Jobs")),
    linkNotice,
    readTrouble,
    h(
      "div",
      { class: "layout" },
      h(
        "section",
        { class: "panel", "aria-labelledby": "jobs-heading" },
        h("h2", { id: "jobs-heading" }, "Job postings"),
        jobForm(),
        jobList,
        moreJobs,
        moreJobsError,
      ),
      h(
        "aside",
        { class: "panel panel--side", "aria-label": "AI settings and CVs" },
        h("h2", {}, "AI settings"),
        settingsSlot,
        h("h2", { id: "cvs-heading" }, "CVs"),
        cvForm(),
        cvList,
        moreCvs,
      ),
    ),
    announcer,
  );

  deleter.prepare(jobList); // a start may find its card's job gone: the line says so
  deleter.prepare(cvList);

  function jobForm() {
    const title = h("input", { name: "title", required: true, dir: "auto" });
    const company = h("input", { name: "company", dir: "auto" });
    const description = h("textarea", { name: "description", required: true, rows: 5, dir: "auto" });
    const action = "add the job";
    const titleLimit = limitText(title, { max: JOB_TITLE_MAX, noun: "The title", action, line: true });
    const companyLimit = limitText(company, { max: JOB_COMPANY_MAX, noun: "The company", action, line: true });
    const limit = limitText(description, { max: JOB_DESCRIPTION_MAX, noun: "The description", action });
    const error = formError();
    const added = addedStatus();
    const form = h(
      "form",
      { class: "form", id: "add-job", "aria-label": "Add a job posting", novalidate: true },
      field("Title", title),
      titleLimit.element,
      field("Company", company),
      companyLimit.element,
      field("Description", description),
      limit.element,
      error,
      h("button", { type: "submit", class: "button" }, "Add job"),
      added,
    );
    onSubmitOnce(form, async () => {
      added.textContent = "";
      if (!checkFilled(form)) return; // each empty field says so below it
      if (overLimit([[title, titleLimit], [company, companyLimit], [description, limit]])) return;
      try {
        // A line goes trimmed, as it is counted: the server would count its blanks too.
        const job = { title: serverTrimmed(title.value), company: serverTrimmed(company.value), description: description.value };
        await post("/api/jobs", { json: job });
        added.replaceChildren("Job “", h("span", { dir: "auto" }, job.title), "” added.");
        form.reset();
        limit.refresh();
        showFormError(error, null);
        await load(1);
      } catch (failure) {
        showFormError(error, failure);
        markRefusedField(form, failure, () => clearFormError(error, failure)); // edited: the refusal is moot
      }
    });
    return form;
  }

  function cvForm() {
    const filename = h("input", { name: "filename", required: true, dir: "auto", placeholder: "e.g. my-cv.txt" });
    const text = h("textarea", { name: "text", required: true, rows: 4, dir: "auto" });
    const action = "add the CV";
    const nameLimit = limitText(filename, { max: ATTACHMENT_FILENAME_MAX, noun: "The file name", action, line: true });
    const limit = limitText(text, { max: CV_TEXT_MAX, noun: "The CV text", action });
    const error = formError();
    const added = addedStatus();
    const form = h(
      "form",
      { class: "form", id: "add-cv", "aria-label": "Add a CV", novalidate: true },
      field("File name", filename),
      nameLimit.element,
      field("CV text", text, "Paste the text of your CV."),
      limit.element,
      error,
      h("button", { type: "submit", class: "button" }, "Add CV"),
      added,
    );
    onSubmitOnce(form, async () => {
      added.textContent = "";
      if (!checkFilled(form)) return;
      if (overLimit([[filename, nameLimit], [text, limit]])) return;
      try {
        const name = serverTrimmed(filename.value); // sent trimmed, as it was counted
        await post("/api/attachments", { json: { kind: "cv", filename: name, text: text.value } });
        added.replaceChildren("CV “", h("span", { dir: "auto" }, name), "” added.");
        form.reset(); // ready for the next CV: a kept name would be sent with another text
        limit.refresh();
        showFormError(error, null);
        filename.focus();
        await load();
      } catch (failure) {
        showFormError(error, failure);
        markRefusedField(form, failure, () => clearFormError(error, failure)); // edited: the refusal is moot
      }
    });
    return form;
  }

  // What a form added, said once it is (role status: made with the form, so a screen reader
  // hears what is written into it).
  function addedStatus() {
    return h("p", { class: "hint form-status", role: "status" });
  }

  // Every card repeats its controls, so each one's accessible name says whose it is
  // ("Start strategy snapshot: Engineer at Acme"), starting with the words it shows.
  function analysisBlock(task, subjectId, subjectName) {
    const path = taskPath(task, subjectId);
    const taskType = task.name;
    const contextSelect = task.context ? referenceSelect(task.context, choices.get(path) ?? lastChoice(path)) : null;
    contextSelect?.addEventListener("change", () => choices.set(path, contextSelect.value)); // survives a redraw
    const contextField = task.context?.field;
    const slot = h("div", { class: "analysis", "aria-live": "polite" });
    const error = formError();
    const notice = h("p", { class: "hint analysis__notice", role: "status", hidden: true });
    const start = h("button", { type: "button", class: "button", "aria-label": `${task.action}: ${subjectName}` }, task.action);
    const planNote = h("p", { class: "hint analysis__plan", id: `plan-note-${(planNotes += 1)}`, hidden: true });
    const entry = { view: null, active: true, live: false, looks: 0, over: null, operationId: null, endSeen: null, endAsked: null, starting: false, reading: false };
    Object.assign(entry, {
      path,
      error,
      start,
      planNote,
      shown: null, // its operation as the card last heard of it (null: none)
      cardError: null, // the error it shows: {unreached, state (of `shown` then)}
      notice,
      noticeUntilEnd: false, // the notice is about the run under way (a retry's)
      noticeUntilRead: false, // the notice is about a result still to load
      rendered: false, // the card has shown its first answer
      earlier: null, // a past run's result to show once the card has loaded
      retrying: false, // a retry of this card's is on its way
      readFailures: 0, // reads failed in a row
      readFailure: null, // the last one's error
      retryTimer: null, // the next read after a failure, while it waits
      budgetReadFor: null, // the run whose start this tab's budget line was read again for
    });
    const name = `${task.label} for ${subjectName}`;
    entry.view = createAnalysisView(slot, taskType, {
      onCancel: (operation) => cancelAnalysis(entry, operation, name, () => start),
      onRetry: (operation) => retryAnalysis(entry, operation),
      focusFallback: () => start,
      announce: (text) => (announcer.textContent = text),
      name,
    });
    // At most one start at a time: a second click, or Enter pressed again, while the first
    // start is on its way asks nothing. aria-disabled says it is busy and keeps its focus
    // (`disabled` would drop focus to the page).
    start.addEventListener("click", async () => {
      if (entry.starting) return;
      start.setAttribute("aria-disabled", "true");
      showNotice(entry, "");
      entry.starting = true; // its own look follows: the stream's news of it needs none
      try {
        const choice = contextSelect ? contextSelect.value : "";
        const body = choice ? { [contextField]: choice } : {};
        const started = await post(path, { json: body, headers: { "Idempotency-Key": `${taskType}-${path}-${Date.now()}` } });
        keepChoice(path, choice);
        clearCardError(entry);
        if (started.reused) {
          // The analysis under way answered (ADR 0058): no second one, and when this one runs.
          showNotice(entry, reusedNotice(started));
          entry.noticeUntilEnd = true; // about this run: gone when it ends
        } else {
          entry.budgetReadFor = started.operation_id;
          budgetChanged(); // its reservation is taken
        }
        lookAgain(entry); // shows the new analysis now, then polls at its pace
      } catch (failure) {
        if (failure.status === 404 && startedOnGone(entry, task, subjectId, subjectName, failure)) return;
        // A spent daily budget's sentence says when it renews; seconds to midnight would not help.
        const spent = failure.code === "budget_exhausted";
        const wait = failure.retryAfter && !spent ? ` Try again in ${failure.retryAfter} s.` : "";
        const said = spent ? refusalInReadersTime(failure.message, failure.retryAfter) : failure.message;
        showCardError(entry, failure, `${said}${wait}`);
        // Unanswered, the start may still have reached the server: the card reads what is
        // there (the stream's news of it was passed over while this start was on its way).
        if (failure.status === 0) lookAgain(entry);
      } finally {
        start.removeAttribute("aria-disabled");
        entry.starting = false;
      }
    });
    analyses.set(path, entry);
    showPlan(entry);
    const choice = contextSelect ? field(referenceLabel(task.context, subjectName), contextSelect) : null;
    return h("div", { class: "analysis-block" }, h("div", { class: "analysis__start" }, choice, start), planNote, error, notice, slot);
  }

  // A start answered 404: the job or CV of the card is gone (another tab or the API deleted
  // it), and its card leaves as a delete that found it gone does; or the one chosen to compare
  // with is, which leaves too (and the choices), and the card says so. Answers whether the
  // 404 was either.
  function startedOnGone(entry, task, subjectId, subjectName, failure) {
    if (failure.code === `${task.subject.name}_not_found`) {
      deleter.alreadyDeleted(entry.start.closest("li.item"), task.subject.name, subjectId, subjectName);
      return true;
    }
    const kind = task.context?.name;
    const chosen = entry.start.closest(".analysis-block").querySelector("select")?.value;
    const row = kind && failure.code === `${kind}_not_found` ? rows[kind].find((known) => known.id === chosen) : null;
    if (!row) return false;
    const item = document.getElementById(`${kind}-${row.id}`);
    if (item) deleter.alreadyDeleted(item, kind, row.id, rowName(kind, row));
    else forget(kind, row.id); // not shown (an older job): only the choices offer it
    showCardError(entry, failure, `${rowName(kind, row)} had already been deleted: choose another ${task.context.label}, or none.`);
    return true;
  }

  // On a Free plan no analysis starts: each card says so before its start is pressed (the
  // button stays; pressed, the server's refusal says it again).
  function showPlan(entry) {
    const free = plan !== null && plan !== "pro";
    entry.planNote.textContent = free ? "AI analyses need the Pro plan: your plan is Free (see AI settings)." : "";
    entry.planNote.hidden = !free;
    if (free) entry.start.setAttribute("aria-describedby", entry.planNote.id);
    else entry.start.removeAttribute("aria-describedby");
  }

  // An error on a card lasts while it is true: one that the server could not be reached goes
  // once the page hears from the server again (`reached`); a refusal once the card's
  // analysis has moved on (another run, another state, its end). `at` is where it shows:
  // "start" (under the start button: a start's or a retry's) or "cancel" (beside Cancel).
  function showCardError(entry, failure, message, at = "start") {
    clearCardError(entry);
    if (at === "cancel") entry.view.showActionError(message);
    else showFormError(entry.error, { message });
    entry.cardError = { unreached: failure.status === 0, state: stateKey(entry.shown) };
  }

  function clearCardError(entry) {
    if (!entry.cardError) return;
    entry.cardError = null;
    showFormError(entry.error, null);
    entry.view.showActionError("");
  }

  function stateKey(operation) {
    return operation ? `${operation.id}|${operation.state}|${operation.cancel_requested}` : "";
  }

  // The card heard from the server (a read, the event stream, the long-poll, an action's
  // answer): `operation` is its analysis as it is now, null for none.
  function heard(entry, operation) {
    entry.shown = operation;
    reached();
    if (entry.cardError && stateKey(operation) !== entry.cardError.state) clearCardError(entry);
  }

  // The server answered: no error that it could not be reached is true any more.
  function reached() {
    for (const element of unreached) showFormError(element, null);
    for (const entry of analyses.values()) if (entry.cardError?.unreached) clearCardError(entry);
  }

  // What a start that found its analysis already under way says: it started no second one,
  // and when the one there runs ("already scheduled for …" when it waits for a later time).
  function reusedNotice(started) {
    const when = started.not_before ? `scheduled for ${formatTime(started.not_before)}` : "under way";
    return `This analysis is already ${when}: no second one was started.`;
  }

  function showNotice(entry, text) {
    entry.noticeUntilEnd = false;
    entry.noticeUntilRead = false;
    entry.notice.textContent = text;
    entry.notice.hidden = !text;
  }

  // The same cancel as on /operations: confirmed first; a running analysis stops
  // at its next checkpoint, and the page looks again at once.
  // While the dialog is open the analysis may end (it finishes, or another tab cancels
  // it): the dialog then says so and offers only to close, and a confirm that crossed
  // the end on its way (409) reads as what it is, not as an error. Its Cancel button
  // gone with the end, focus goes back to `focusFallback()`.
  async function cancelAnalysis(entry, operation, name, focusFallback) {
    const confirmed = await cancels.confirm(entry, {
      name,
      title: "Cancel this analysis?",
      message: `${name} will stop. An analysis that is already running stops at its next checkpoint.`,
      confirmLabel: "Stop analysis",
      focusFallback,
    });
    if (!confirmed) return;
    showNotice(entry, "");
    let updated = null;
    try {
      updated = await post(`/api/operations/${encodeURIComponent(operation.id)}/cancel`);
      clearCardError(entry);
      entry.view.showOperation(updated);
      heard(entry, updated);
    } catch (failure) {
      if (failure.status !== 409) {
        // Beside the Cancel button, which stays to try again: nothing changed to look at.
        const what = failure.status === 0 ? "The cancel was not sent." : "The cancel did not go through.";
        showCardError(entry, failure, `${what} ${failure.message} The analysis goes on: you can try again.`, "cancel");
        return;
      }
      clearCardError(entry);
      showNotice(entry, "The analysis had already finished: there was nothing left to stop.");
    }
    if (!endLoadedSince(entry, updated)) {
      lookAgain(entry);
      entry.endAsked = updated; // the stream's news of this same end needs no look of its own
    }
  }

  // The same retry as on /operations: the operation runs again (a new attempt), and its
  // earlier notification goes (seed 003); the user is told both where they clicked. One
  // request at a time per card; a retry that found the analysis no longer failed or
  // cancelled (409: another tab retried it first) says so calmly, as /operations does.
  async function retryAnalysis(entry, operation) {
    if (entry.retrying) return;
    entry.retrying = true;
    try {
      const updated = await post(`/api/operations/${encodeURIComponent(operation.id)}/retry`);
      clearCardError(entry);
      showNotice(entry, "Queued again. The earlier notice is cleared; you will be told when this run ends.");
      entry.noticeUntilEnd = true; // the run's end is the news it promised
      entry.view.showOperation(updated);
      heard(entry, updated);
      notificationsChanged(); // the bell counts one notice fewer
      budgetChanged(); // runs again: the budget line reads again, as after a start
    } catch (failure) {
      if (failure.status === 409) {
        clearCardError(entry);
        showNotice(entry, "This analysis had already been started again: there was nothing to retry.");
      } else {
        showCardError(entry, failure, failure.message);
      }
    } finally {
      entry.retrying = false;
      lookAgain(entry);
    }
  }

  // An analysis seen ending: a cancel dialog open for it says so.
  function sawEnd(entry) {
    cancels.ended(entry);
  }

  // Whether the long-poll saw `operation` end as it is now and has loaded the result
  // already: a cancel that ends a queued analysis wakes the long-poll too, and its
  // answer can come before the cancel's; a second look would read the same again.
  function endLoadedSince(entry, operation) {
    return sameVersion(entry.endSeen, operation);
  }

  // Whether the end the stream or the long-poll reports is the one the cancel's own
  // look reads already: either may come first, and the page reads the end once.
  function endAskedFor(entry, operation) {
    return sameVersion(entry.endAsked, operation);
  }

  function sameVersion(a, b) {
    return Boolean(a && b && a.id === b.id && a.updated_at === b.updated_at);
  }

  // After the user acted: drop answers to looks already on their way (they predate
  // the change) and look now, whatever the last answer said.
  function lookAgain(entry) {
    clearTimeout(entry.retryTimer);
    entry.retryTimer = null;
    entry.looks += 1;
    entry.active = true;
    entry.lookWanted = true; // read once even while the stream follows it: a new run's id is news
    poller.refresh();
  }

  // A choice of the caller's rows of one kind, for a task's optional second reference;
  // `chosen` (the last run's) is selected while it is still there. Every CV is offered; jobs
  // as far as they are loaded, and while older ones are not, the last option says how to
  // reach them.
  function referenceSelect(kind, chosen) {
    const select = h("select", { dataset: { kind: kind.name } });
    fillReferences(select, chosen);
    return select;
  }

  // The choice's label, shown above it ("CV to compare with", WCAG 3.3.2); its name goes on
  // to say whose card it is ("CV to compare with Engineer at Acme"), which only a screen
  // reader needs: every card repeats the choice. The name starts with the words shown (2.5.3).
  function referenceLabel(kind, subjectName) {
    const label = kind.label.charAt(0).toUpperCase() + kind.label.slice(1);
    return [`${label} to compare with`, h("span", { class: "visually-hidden" }, ` ${subjectName}`)];
  }

  // The options of every card's choice of one kind are the same: built once per change
  // of the rows, then copied into each card's select (a list of 500 CVs, on 50 cards).
  const optionTemplates = new Map(); // kind name -> DocumentFragment of its options
  function fillReferences(select, chosen) {
    const kindName = select.dataset.kind;
    if (!optionTemplates.has(kindName)) {
      const kind = TASKS.find((known) => known.context?.name === kindName)?.context;
      const fragment = document.createDocumentFragment();
      fragment.append(
        h("option", { value: "" }, `Without a ${kind?.label ?? kindName}`),
        ...rows[kindName].map((row) => h("option", { value: row.id, dir: optionDirection(kindName, row) }, rowName(kindName, row))),
      );
      if (kindName === "job" && jobsNext) fragment.append(h("option", { value: "", disabled: true }, "Older jobs: use “Show more jobs” to list them here"));
      optionTemplates.set(kindName, fragment);
    }
    select.replaceChildren(optionTemplates.get(kindName).cloneNode(true));
    select.value = rows[kindName].some((row) => row.id === chosen) ? chosen : "";
  }

  // The rows of a kind changed (more jobs loaded, one deleted): each card's choice offers
  // them, its choice kept while its row is there.
  function refreshReferences(kindName) {
    optionTemplates.delete(kindName);
    for (const select of document.querySelectorAll(`select[data-kind="${kindName}"]`)) fillReferences(select, select.value);
  }

  // A name of one piece of user text sets its own direction. "<title> at <company>" is two,
  // which an option cannot isolate (it holds text alone): it keeps the page's, or an Arabic
  // title at a Latin company read "at Acme Corp <title>".
  function optionDirection(kind, row) {
    return kind === "job" && row.company ? null : "auto";
  }

  function rowName(kind, row) {
    if (kind !== "job") return row.filename;
    return row.company ? `${row.title} at ${row.company}` : row.title;
  }

  function analysisBlocks(kind, row) {
    return tasksFor(kind).map((task) => analysisBlock(task, row.id, rowName(kind, row)));
  }

  // Up to `count` rows of a collection (e.g. "/api/jobs"), from `token` on, in pages of at
  // most PAGE_SIZE_MAX; and the token of the rest, "" when there is none. With `known` (the
  // pages as last read, {etag, body} by URL), each page is asked for with the ETag it had
  // and one unchanged comes as a 304 without a body; `known` then holds the pages read.
  async function listed(collection, count, token = "", known = null) {
    const items = [];
    const urls = new Set();
    do {
      const query = new URLSearchParams({ page_size: String(Math.min(PAGE_SIZE_MAX, count - items.length)) });
      if (token) query.set("page_token", token);
      const url = `${collection}?${query}`;
      let page;
      if (known) {
        const answer = await revalidate(url, known.get(url));
        known.set(url, answer);
        urls.add(url);
        page = answer.body;
      } else {
        page = await api(url);
      }
      items.push(...page.items);
      token = page.next_page_token ?? "";
    } while (token && items.length < count);
    for (const url of known?.keys() ?? []) if (!urls.has(url)) known.delete(url);
    return { items, next: token };
  }

  // The jobs shown and every CV (they come without their text). Read again (the page shown
  // again), each page unchanged since is a 304 with no body: a user with many jobs or CVs is
  // not sent them all again at every return to the tab. The lists are made from the
  // server's pages either way, so one added or deleted elsewhere comes or goes as before.
  const jobPages = new Map();
  const cvPages = new Map();
  function listedJobs(count) {
    return listed("/api/jobs", count, "", jobPages);
  }
  function listedCvs() {
    return listed("/api/attachments", Infinity, "", cvPages);
  }

  // The lists are read one reading at a time: a refresh and a load at once would show a
  // card twice.
  let listing = Promise.resolve();
  function inTurn(task) {
    const turn = listing.then(task);
    listing = turn.catch(() => {});
    return turn;
  }

  // Both lists first: each kind's rows offer the other kind as a task's context. Every
  // CV, and as many jobs as were shown and `added` since (what "Show more" showed stays).
  function load(added = 0) {
    return inTurn(() => loadNow(added));
  }

  let loaded = false;
  async function loadNow(added) {
    const jobCount = Math.max(JOBS_PAGE, rows.job.length + added);
    const [jobs, cvs] = await Promise.all([listedJobs(jobCount), listedCvs()]);
    loaded = true;
    reached();
    rows.job = jobs.items;
    jobsNext = jobs.next;
    rows.attachment = cvs.items;
    for (const entry of analyses.values()) clearTimeout(entry.retryTimer);
    analyses.clear();
    optionTemplates.clear();
    renderJobs();
    renderCvs();
    showReadTrouble();
    showTarget();
    showLinkedResult();
    poller.refresh();
  }

  // Shown again (visibilitychange): jobs and CVs added or deleted meanwhile elsewhere (another
  // tab, the API) come and go; the event stream tells of operations only. A job missing from
  // the first pages is read alone, unless every job was listed: new ones may have pushed it
  // further down.
  function refreshLists() {
    return inTurn(async () => {
      if (!loaded) return;
      const [jobs, cvs] = await Promise.all([listedJobs(Math.max(JOBS_PAGE, rows.job.length)), listedCvs()]);
      reached();
      const missing = rows.job.filter((row) => !jobs.items.some((job) => job.id === row.id));
      const gone = jobs.next ? await goneJobs(missing) : missing;
      const kept = missing.filter((row) => !gone.includes(row)); // further down now
      sync("job", [...jobs.items, ...kept], gone);
      if (!jobs.next && !kept.length) jobsNext = "";
      sync("attachment", cvs.items, rows.attachment.filter((row) => !cvs.items.some((cv) => cv.id === row.id)));
    });
  }

  // Those of the jobs `candidates` the server no longer has (404).
  async function goneJobs(candidates) {
    const read = (row) => api(`/api/jobs/${encodeURIComponent(row.id)}`).then(
      () => null,
      (failure) => (failure.status === 404 ? row : null),
    );
    return (await Promise.all(candidates.map(read))).filter(Boolean);
  }

  // The rows of `kind` are `fresh` now (in order) and `gone` went: their cards leave (in the
  // words of a delete that found them gone) and new ones come in their place in the order.
  function sync(kind, fresh, gone) {
    const list = kind === "job" ? jobList : cvList;
    for (const row of gone) {
      const item = document.getElementById(`${kind}-${row.id}`);
      if (item && list.contains(item)) deleter.alreadyDeleted(item, kind, row.id, rowName(kind, row));
      else forget(kind, row.id);
    }
    const known = new Set(rows[kind].map((row) => row.id));
    const added = fresh.filter((row) => !known.has(row.id));
    if (!added.length) return;
    const empty = rows[kind].length === 0;
    rows[kind] = fresh;
    if (kind === "attachment") cvsShown += added.length;
    refreshReferences(kind);
    if (empty) {
      (kind === "job" ? renderJobs : renderCvs)(); // its placeholder goes
    } else {
      for (const row of added) {
        const after = fresh.slice(fresh.indexOf(row) + 1).find((other) => known.has(other.id));
        const before = after ? document.getElementById(`${kind}-${after.id}`) : null;
        const card = (kind === "job" ? jobItem : cvItem)(row);
        if (before && list.contains(before)) before.before(card);
        else list.append(card);
      }
    }
    moreJobs.hidden = !jobsNext;
    moreCvs.hidden = rows.attachment.length <= cvsShown;
    poller.refresh(); // the new cards' first look
  }

  // The next page of jobs below the others; focus moves to the first of them (the button
  // goes once there are no more, and focus must not fall to the page).
  async function showMoreJobs() {
    if (moreJobs.getAttribute("aria-disabled") === "true") return;
    moreJobs.setAttribute("aria-disabled", "true");
    try {
      const page = await listed("/api/jobs", JOBS_PAGE, jobsNext);
      const shown = new Set(rows.job.map((job) => job.id));
      const added = page.items.filter((job) => !shown.has(job.id)); // one added meanwhile moved the pages
      rows.job.push(...added);
      jobsNext = page.next;
      showFormError(moreJobsError, null);
      const items = added.map(jobItem);
      jobList.append(...items);
      moreJobs.hidden = !jobsNext;
      refreshReferences("job");
      (items[0]?.querySelector("h3") ?? jobList.lastElementChild?.querySelector("h3"))?.focus();
      poller.refresh(); // their analyses' first look
    } catch (failure) {
      showFormError(moreJobsError, { message: `More jobs could not be loaded. ${failure.message}` });
    } finally {
      moreJobs.removeAttribute("aria-disabled");
    }
  }

  // CVs up to the `count`th below those shown; answers the first of them.
  function revealCvs(count) {
    const items = rows.attachment.slice(cvsShown, count).map(cvItem);
    cvsShown = Math.max(cvsShown, count);
    cvList.append(...items);
    moreCvs.hidden = rows.attachment.length <= cvsShown;
    if (items.length) poller.refresh();
    return items[0] ?? null;
  }

  function showMoreCvs() {
    revealCvs(cvsShown + CVS_STEP)?.querySelector("h3").focus();
  }
  moreJobs.addEventListener("click", showMoreJobs);
  moreCvs.addEventListener("click", showMoreCvs);

  // "View result" on a past run (/jobs?result=<operation id>#job-<id>): that run's own
  // result, on its card, once per link; a result no longer kept says so there, and one
  // with no card to show it on says so at the top, as /operations does for its links.
  let shownResult = "";
  async function showLinkedResult() {
    const operationId = new URLSearchParams(window.location.search).get("result");
    if (!operationId || shownResult === operationId) return;
    shownResult = operationId;
    let result;
    try {
      result = await api(`/api/operations/${encodeURIComponent(operationId)}/result`);
    } catch (failure) {
      const target = /^#(job|attachment)-(.+)$/.exec(window.location.hash);
      const path = target ? tasksFor(target[1]).map((known) => taskPath(known, decodeURIComponent(target[2])))[0] : null;
      const entry = path ? analyses.get(path) : null;
      const missing = failure.status === 404 ? await whyNoResult(operationId) : null;
      if (entry) showNotice(entry, missing ? missing.onCard : failure.message);
      else showLinkNotice(missing ? missing.atTop : `The result you opened could not be loaded. ${failure.message}`);
      return;
    }
    const known = taskNamed(result.task_type);
    const entry = known ? analyses.get(taskPath(known, result.subject.id)) : null;
    if (!entry) {
      showLinkNotice("The result you opened is of a job or CV not listed here.");
      return;
    }
    if (entry.rendered) openLinked(entry, result);
    else entry.earlier = result; // shown once the card has loaded
  }

  // Why a run has no result to show (its result answered 404), read from the run itself:
  // not a run of the caller's at all (a mistyped link), no longer kept, or never made.
  // Answers the sentence for its card and the one for the top of the page.
  async function whyNoResult(operationId) {
    let operation;
    try {
      operation = await api(`/api/operations/${encodeURIComponent(operationId)}`);
    } catch (failure) {
      if (failure.status === 404) {
        return { onCard: "That result was not found: the link names no run of yours.", atTop: "The result you opened was not found among yours." };
      }
      return { onCard: "That run's result could not be found.", atTop: "The result you opened is not among yours, or no longer kept." };
    }
    if (operation.state === "succeeded") {
      const gone = "That run's result is no longer kept: each analysis keeps its newest 20 results.";
      return { onCard: gone, atTop: gone };
    }
    const ended = { failed: "failed", cancelled: "was cancelled" }[operation.state];
    const none = ended ? `That run ${ended}, so it has no result.` : "That run has not finished yet, so it has no result.";
    return { onCard: none, atTop: none };
  }

  function showLinkNotice(text) {
    linkNotice.textContent = text;
    linkNotice.hidden = false;
  }

  // The linked run's result on its card, brought into view: the card was scrolled to
  // before its result had loaded below it.
  function openLinked(entry, result) {
    entry.view.showEarlier(result).scrollIntoView({ block: "nearest" });
  }

  // The job (or CV) a link named, e.g. "View result" on /operations: once per link,
  // so adding a job or CV later does not scroll back to it.
  let shownHash = "";
  function showTarget() {
    const match = /^#((?:job|attachment)-.+)$/.exec(window.location.hash);
    const id = match ? decodeURIComponent(match[1]) : "";
    const cv = rows.attachment.findIndex((row) => `attachment-${row.id}` === id);
    if (cv >= cvsShown) revealCvs(cv + 1); // every CV is loaded: one further down is shown
    const target = id ? document.getElementById(id) : null;
    if (!target || shownHash === window.location.hash) return;
    shownHash = window.location.hash;
    highlight(target);
  }

  // A link from an empty list to the form that fills it; following it starts typing there.
  function toForm(formId, text) {
    const go = (event) => {
      event.preventDefault();
      const form = document.getElementById(formId);
      form?.scrollIntoView({ block: "nearest" });
      form?.querySelector("input, textarea")?.focus();
    };
    return h("a", { href: `#${formId}`, onclick: go }, text);
  }

  // User text (a title, a file name) sets its own direction (dir="auto"): an Arabic
  // file name reads right to left.
  // A heading takes focus (tabindex -1) when "Show more" brings its item.
  function jobItem(job) {
    const name = rowName("job", job);
    return h(
      "li",
      { class: "item", id: `job-${job.id}` },
      h("h3", { dir: "auto", tabindex: "-1" }, job.title),
      job.company ? h("p", { class: "hint", dir: "auto" }, job.company) : null,
      h(
        "details",
        { class: "item__description" },
        h("summary", { "aria-label": `Description: ${name}` }, "Description"),
        h("div", { class: "item__description-text", dir: "auto" }, job.description),
      ),
      analysisBlocks("job", job),
      deleter.control("job", job.id, name),
    );
  }

  function cvItem(cv) {
    return h(
      "li",
      { class: "item", id: `attachment-${cv.id}` },
      h("h3", { dir: "auto", tabindex: "-1" }, cv.filename),
      h("p", { class: "hint" }, `${formatNumber(cv.text_length)} characters`),
      analysisBlocks("attachment", cv),
      deleter.control("attachment", cv.id, rowName("attachment", cv)),
    );
  }

  // A job or CV deleted, or found gone: no choice offers it and no poll reads its analyses.
  // The results made with it went too (ADR 60), so every other card reads its own again.
  function forget(kind, id) {
    const index = rows[kind].findIndex((row) => row.id === id);
    if (index < 0) return;
    rows[kind].splice(index, 1);
    if (kind === "attachment" && index < cvsShown) cvsShown -= 1; // its card was one of those shown
    for (const known of tasksFor(kind)) {
      clearTimeout(analyses.get(taskPath(known, id))?.retryTimer);
      analyses.delete(taskPath(known, id));
    }
    refreshReferences(kind);
    for (const entry of analyses.values()) lookAgain(entry);
    if (rows[kind].length === 0 && !(kind === "job" && jobsNext)) (kind === "job" ? renderJobs : renderCvs)(); // says how to add one
  }

  function renderJobs() {
    replaceChildren(
      jobList,
      rows.job.length === 0
        ? h("li", { class: "placeholder placeholder--empty" }, h("p", {}, "No jobs yet: ", toForm("add-job", "add a job posting"), " to analyse it."))
        : rows.job.map(jobItem),
    );
    moreJobs.hidden = !jobsNext;
  }

  function renderCvs() {
    replaceChildren(
      cvList,
      rows.attachment.length === 0
        ? h("li", { class: "hint" }, "No CV yet: ", toForm("add-cv", "add your CV"), " to compare it with a job.")
        : rows.attachment.slice(0, cvsShown).map(cvItem),
    );
    moreCvs.hidden = rows.attachment.length <= cvsShown;
  }

  // One read of an analysis, shown on its card. `ended` is its operation as the stream or
  // the long-poll saw it end: a read that fails shows that end meanwhile (not "Running",
  // its draft still growing), and is tried again (readFailed).
  async function refreshAnalysis(path, ended = null) {
    const entry = analyses.get(path);
    if (!entry) return;
    const look = ++entry.looks;
    entry.reading = true;
    let answer;
    try {
      answer = await api(path);
    } catch (failure) {
      if (look !== entry.looks) return; // a newer look is on its way
      entry.reading = false;
      readFailed(entry, failure, ended);
      return;
    }
    if (look !== entry.looks) return; // a newer look is on its way
    entry.reading = false;
    readSucceeded(entry);
    const wasActive = entry.over === false;
    entry.active = isActive(answer);
    entry.live = isLiveAnswer(answer);
    entry.over = answer.operation ? !entry.active : null;
    const operationId = answer.operation?.id ?? null;
    if (entry.operationId && entry.operationId !== operationId) follower.stop(entry.operationId);
    // A run started elsewhere (another tab, the API), seen here first under way: its
    // reservation moved the budget, which this tab's line showed as before until the run ended.
    if (entry.rendered && entry.active && operationId && operationId !== entry.operationId && operationId !== entry.budgetReadFor) {
      entry.budgetReadFor = operationId;
      budgetChanged();
    }
    entry.operationId = operationId;
    entry.view.render(answer);
    heard(entry, answer.operation ?? null);
    entry.rendered = true;
    if (!entry.active) sawEnd(entry);
    if (entry.earlier) {
      openLinked(entry, entry.earlier);
      entry.earlier = null;
    }
    if (entry.active && !liveOpen()) follower.follow(answer.operation);
    // Seen reaching its end here: its notification is new, so the bell looks now; its
    // reservation is settled into what it spent.
    if (wasActive && entry.over) {
      notificationsChanged();
      budgetChanged();
      if (entry.noticeUntilEnd) showNotice(entry, "");
      entry.noticeUntilEnd = false;
    }
  }

  // A failed read is tried again after a pause that doubles with each failure in a row;
  // until then no poll reads it (lookAgain, the stream's news or its reconnect do).
  function readFailed(entry, failure, ended) {
    entry.readFailures += 1;
    entry.readFailure = failure;
    const delay = Math.min(READ_RETRY_MAX_MS, READ_RETRY_FIRST_MS * 2 ** (entry.readFailures - 1));
    clearTimeout(entry.retryTimer);
    entry.retryTimer = setTimeout(() => {
      entry.retryTimer = null;
      if (analyses.get(entry.path) === entry) lookAgain(entry);
    }, delay);
    if (ended) {
      entry.view.showOperation(ended);
      if (ended.state === "succeeded") {
        showNotice(entry, "This analysis has finished: its result shows here once it can be loaded.");
        entry.noticeUntilRead = true;
      }
    }
    showReadTrouble();
  }

  function readSucceeded(entry) {
    if (entry.readFailures === 0) return;
    entry.readFailures = 0;
    entry.readFailure = null;
    clearTimeout(entry.retryTimer);
    entry.retryTimer = null;
    if (entry.noticeUntilRead) showNotice(entry, "");
    showReadTrouble();
  }

  // While any card's reads fail, the top of the page says its updates are paused and
  // offers to try now, as /operations does. Once none fails the banner goes, and focus in
  // it goes to the title of the first card that was failing (the one "Retry now" read
  // again first): on the page itself it would show no ring (WCAG 2.4.7).
  let troubled = []; // the cards failing when the banner last said so
  const troubleText = h("span");
  const retryReads = h("button", { type: "button", class: "button", onclick: () => failingEntries().forEach(lookAgain) }, "Retry now");
  readTrouble.append(troubleText, retryReads);

  function failingEntries() {
    return [...analyses.values()].filter((entry) => entry.readFailures > 0);
  }

  function showReadTrouble() {
    const failing = failingEntries();
    const failure = failing.at(-1)?.readFailure;
    const why = !failure ? "" : failure.status === 0 || failure.status >= 500 ? "The service is not reachable right now." : failure.message;
    const text = failure ? `Updates paused. ${why} The page keeps trying; you can also retry now.` : "";
    if (troubleText.textContent !== text) troubleText.textContent = text;
    if (failing.length) troubled = failing;
    if (!failure && readTrouble.contains(document.activeElement)) focusRecovered(); // its button goes
    readTrouble.hidden = !failure;
  }

  function focusRecovered() {
    const card = troubled.map((entry) => entry.start.closest("li.item")).find((item) => item?.isConnected);
    const heading = card?.querySelector("h3") ?? document.getElementById("jobs-heading"); // cards redrawn: the list
    heading.tabIndex = -1; // from a script only, never from Tab
    heading.focus();
  }

  function entryOf(operation) {
    for (const [path, entry] of analyses) if (entry.operationId === operation.id) return [path, entry];
    return [null, null];
  }

  // The long-poll's answers: a move is shown in place; the end loads the result.
  const follower = createFollower({
    onMove(operation) {
      const [, entry] = entryOf(operation);
      if (!entry) return;
      entry.live = isLive(operation);
      entry.view.showOperation(operation);
      heard(entry, operation);
    },
    onEnd(operation) {
      const [path, entry] = entryOf(operation);
      if (!path) return;
      entry.active = false; // over: no poll reads it while its result loads
      entry.endSeen = operation;
      sawEnd(entry);
      if (endAskedFor(entry, operation)) return;
      refreshAnalysis(path, operation);
    },
    onFail() {
      poller.refresh();
    },
  });

  function polled(entry) {
    if (entry.lookWanted) return true;
    if (entry.retryTimer !== null) return false; // a failed read waits its turn
    const followed = liveOpen() || follower.isFollowed(entry.operationId);
    return entry.active && !(entry.operationId && followed);
  }

  // The stream's changes: a move of a shown analysis in place, with its answer so far;
  // its end, or a run this page does not show yet (another tab started it), loads it.
  window.addEventListener(LIVE_OPERATION, (event) => {
    const { operation, draft } = event.detail;
    const [path, entry] = entryOf(operation);
    if (entry) {
      if (TERMINAL_STATES.has(operation.state)) {
        entry.active = false; // over: no poll reads it while its result loads
        entry.endSeen = operation;
        sawEnd(entry);
        if (!endAskedFor(entry, operation)) refreshAnalysis(path, operation);
        return;
      }
      entry.live = isLive(operation);
      entry.view.showOperation(operation, draft);
      heard(entry, operation);
      return;
    }
    const known = taskNamed(operation.task_type);
    const other = known ? taskPath(known, operation.subject.id) : null;
    const shown = other ? analyses.get(other) : null;
    if (!shown) return;
    const ended = TERMINAL_STATES.has(operation.state);
    if (shown.starting || shown.reading) {
      // A look on its way reads this change, unless it was answered before the change
      // committed: a move then comes again by the stream, an end never does. One more look
      // after it, for an end.
      if (ended) {
        shown.lookWanted = true;
        poller.refresh();
      }
    } else if (!ended) {
      refreshAnalysis(other);
    }
  });

  // Every analysis once after loading, then those still running that no long-poll
  // follows; answers the delay before the next poll: short while any of them is live.
  async function tick() {
    const due = [...analyses].filter(([, entry]) => polled(entry)).map(([path]) => path);
    for (const path of due) analyses.get(path).lookWanted = false;
    await Promise.all(due.map((path) => refreshAnalysis(path)));
    const live = [...analyses.values()].some((entry) => polled(entry) && entry.live);
    return live ? ANALYSIS_LIVE_POLL_MS : ANALYSIS_POLL_MS;
  }

  // The stream open again after a drop (a gateway restarted, a network came back): a read
  // that failed meanwhile may wait long for its turn, so every card reads again now.
  window.addEventListener(LIVE_OPENED, (event) => {
    if (!event.detail?.reopened) return;
    for (const entry of analyses.values()) {
      clearTimeout(entry.retryTimer);
      entry.retryTimer = null;
      entry.lookWanted = true;
    }
    poller.refresh();
  });

  const poller = visiblePoller(tick, ANALYSIS_POLL_MS);
  window.addEventListener("hashchange", () => {
    shownHash = "";
    showTarget();
  });
  mountAiSettings(settingsSlot).then((settings) => {
    plan = settings?.plan ?? null;
    for (const entry of analyses.values()) showPlan(entry);
  });
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible") refreshLists().catch(() => {}); // the next time, then
  });
  load().catch((failure) => replaceChildren(jobList, h("li", { class: "form-error", role: "alert" }, failure.message)));
}
