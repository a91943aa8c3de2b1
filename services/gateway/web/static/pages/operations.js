// /operations: the caller's operations, refreshed while the page is shown (every
// few seconds; every half second while a live one is shown that neither the tab's
// event stream (live.js) nor a long-poll follows: follow.js follows a few without
// the stream, which answer the moment they move; not at all while the stream is open
// and nothing shown is live: the stream tells every change), with cancel
// (confirmed; a dialog whose operation ends while it is open says so) and retry; the notification list beside them. Each names its subject
// (read from the workspace); /operations#operation-<id> scrolls to and highlights
// one, shown above the list when the list does not hold it. The bell leads to
// /operations#notifications: the notifications come first (on a phone, above the
// operations; on a wide screen they keep their column) and focus moves to them.
// "Show more" grows the list to the newest 100; past them "Show older" pages on to the
// oldest (the head and the tail: see `olderFailed`'s comment).

import { api, post } from "../api.js";
import { cancelDialogs } from "../dialog.js";
import { h, replaceChildren } from "../dom.js";
import { notificationsChanged } from "../events.js";
import { createFollower } from "../follow.js";
import { highlight } from "../highlight.js";
import { LIVE_OPENED, LIVE_OPERATION, liveOpen } from "../live.js";
import { TERMINAL_STATES, cancelCameTooLate, isLive, stateLabel } from "../format.js";
import { mountNotifications } from "../notifications-view.js";
import { createCard, focusTarget, once, operationAnchor, operationName, showCardError, updateCard } from "../operations-view.js";
import { visiblePoller } from "../poller.js";
import { nameFrom, subjectNames } from "../subjects.js";

export const OPERATIONS_POLL_MS = 2000;
export const OPERATIONS_LIVE_POLL_MS = 500;
const NAMES_WAIT_MS = 1500;
const PAGE_STEP = 20;
const PAGE_MAX = 100;
// Past the newest PAGE_MAX, "Show older" reads the next page after the last one shown, by
// the API's page token, as many as a page holds: a year of history is some fifty presses.
const OLDER_STEP = 100;
const FILTERS = [
  ["", "All operations"],
  ["running", "Running"],
  ["queued", "Queued"],
  ["waiting_for_retry", "Waiting to retry"],
  ["succeeded", "Succeeded"],
  ["failed", "Failed"],
  ["cancelled", "Cancelled"],
];

// How long the list was ("Show more" pressed), and where the page was scrolled, live in
// the history entry: a page left for a result and come back to (Back, which loads it
// anew: app.js), or reloaded, showed its first 20 from the top, and a user of hundreds of
// operations paged down again to find their place.
function shownBefore() {
  const shown = Number(window.history.state?.shown);
  return Number.isInteger(shown) && shown > PAGE_STEP ? Math.min(shown, PAGE_MAX) : PAGE_STEP;
}

// And how many "Show older" brought: read again, a page at a time, before the scroll is
// restored (a user a year deep was sent back to the 100th).
function olderBefore() {
  const older = Number(window.history.state?.older);
  return shownBefore() === PAGE_MAX && Number.isInteger(older) && older > 0 ? older : 0;
}

function remember(fields) {
  window.history.replaceState({ ...window.history.state, ...fields }, "");
}

// The filter lives in the address (?state=failed): a reload keeps it, and Back and
// Forward step through the filters chosen.
function filterFromUrl() {
  const state = new URLSearchParams(window.location.search).get("state") ?? "";
  return FILTERS.some(([value]) => value === state) ? state : "";
}

function urlWithFilter(state) {
  const url = new URL(window.location.href);
  if (state) url.searchParams.set("state", state);
  else url.searchParams.delete("state");
  return url;
}

const NOTIFICATIONS_HASH = "#notifications";

function targetFromHash() {
  const match = /^#operation-(.+)$/.exec(window.location.hash);
  return match ? decodeURIComponent(match[1]) : null;
}

export function mount(main) {
  const filter = h("select", { id: "state-filter" }, FILTERS.map(([value, label]) => h("option", { value }, label)));
  const list = h("ol", { class: "ops", "aria-labelledby": "operations-heading" });
  const placeholder = h("div", { class: "placeholder" });
  const banner = h("div", { class: "banner", role: "alert", hidden: true });
  const announcer = h("p", { class: "visually-hidden", role: "status" });
  const more = h("button", { type: "button", class: "button button--quiet", hidden: true }, "Show more");
  // Why the list is read in two parts. Each look (every few seconds, or at each change the
  // stream tells) reads the list again, so the part it reads must stay bounded whatever the
  // history: it is the newest `limit` (at most PAGE_MAX, one API page), "the head". What
  // "Show older" brings past it is "the tail": read once, by the page token that follows
  // the last one shown, and kept as loaded (its cards still move when the stream, a
  // long-poll or an action here tells of a change). A look that finds newer operations
  // pushes the head's oldest past its end: they join the tail, as they were, so nothing
  // between the two parts is skipped and nothing is shown twice (ordered as the API
  // orders: created_at, then id, newest first). Reading the whole grown list at each
  // look instead cost a read of every operation shown, every two seconds: why the list
  // once stopped at PAGE_MAX.
  const olderFailed = h("p", { class: "status", role: "alert", hidden: true });
  const notifications = h("aside", { id: "notifications", class: "panel panel--side panel--notes" });
  const detail = h("ol", { class: "ops ops--detail", "aria-label": "The operation you opened", hidden: true });
  const cards = new Map();
  let limit = shownBefore();
  let scrollBefore = Number(window.history.state?.scrollY) || 0; // restored once, by the first list shown
  let olderToRestore = olderBefore(); // read past the head by the first list shown
  let restoring = false;
  let loaded = false;
  let names = new Map(); // "type:id" -> the subject's name, or null
  const states = new Map(); // id -> the last state seen here, for every operation shown so far
  let newestSeen = "";
  let looked = false;
  let target = targetFromHash(); // an operation a link asked for
  let targetShown = false;
  const cancelling = new Map(); // id -> name: cancels asked for here, until they end
  const acting = new Set(); // "id:action" asked here and not answered yet: one request per intent
  // Cards whose error says the server could not be reached: no longer true once a load answers.
  const unreachedOn = new Set();
  // After "Show more": {index, limit} of the first card it brings, to focus; after "Show
  // older": {older: true}, until its page is shown (`focusShownOlder`).
  let moreFocus = null;
  let head = []; // the newest operations, as the last look read them
  let headToken = null; // the page token after the head, as the last look answered
  let pagedPast = false; // "Show older" pressed under this filter: the tail is kept
  let tail = []; // older than the head's last, as loaded (see `olderFailed` above); setTail
  let tailAt = new Map(); // id -> its index in `tail`
  const namedOn = new WeakMap(); // card -> the subject's name it shows
  let tailToken = null; // the page token after the tail's last; null: nothing older
  let tailLast = null; // the operation `tailToken` follows
  let tailEpoch = 0; // a filter chosen: a page of the tail asked before it is dropped
  const cancels = cancelDialogs(); // keyed by operation id

  replaceChildren(
    main,
    h(
      "div",
      { class: "page-head" },
      h("h1", {}, "Operations"),
      h("div", { class: "filter" }, h("label", { for: "state-filter" }, "Show"), filter),
    ),
    h(
      "div",
      { class: "layout layout--operations" },
      h(
        "section",
        { class: "panel panel--operations", "aria-labelledby": "operations-heading", "aria-busy": "true" },
        h("h2", { id: "operations-heading", class: "visually-hidden" }, "Your operations"),
        banner,
        detail,
        placeholder,
        list,
        more,
        olderFailed,
        announcer,
      ),
      notifications,
    ),
  );
  const section = list.closest("section");
  mountNotifications(notifications);

  // The bell's destination: the notifications before the operations (so a phone shows
  // them at the top and Tab walks them first), in view, with focus on their heading.
  function showNotifications() {
    if (section.previousElementSibling !== notifications) section.before(notifications);
    notifications.scrollIntoView({ block: "start" });
    notifications.querySelector("h2").focus({ preventScroll: true });
  }
  if (window.location.hash === NOTIFICATIONS_HASH) showNotifications();
  // The bell on this page: the same, without loading the page again (the filter stays).
  document.getElementById("bell")?.addEventListener("click", (event) => {
    if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
    event.preventDefault();
    if (window.location.hash !== NOTIFICATIONS_HASH) {
      const url = new URL(window.location.href);
      url.hash = NOTIFICATIONS_HASH;
      window.history.pushState(null, "", url);
    }
    showNotifications();
  });
  const handlers = { cancel: cancelOperation, retry: retryOperation };

  function describe(operation) {
    return operationName(operation, nameFrom(names, operation.subject));
  }

  // Every card shows an operation through here: one seen ending tells a cancel dialog
  // open for it, which then says so.
  function showOnCard(card, operation) {
    keepInTail(operation);
    const name = nameFrom(names, operation.subject);
    namedOn.set(card, name);
    updateCard(card, operation, handlers, name);
    if (TERMINAL_STATES.has(operation.state)) cancels.ended(operation.id);
  }

  function cardOf(operationId) {
    return cards.get(operationId) ?? detail.querySelector(`li.op[data-id="${CSS.escape(operationId)}"]`);
  }

  function showPlaceholder(kind, ...content) {
    placeholder.className = `placeholder placeholder--${kind}`;
    replaceChildren(placeholder, ...content);
    placeholder.hidden = false;
  }

  function explain(error) {
    if (error.status === 0 || error.status >= 500) {
      return "The service is not reachable right now. The page keeps trying; you can also retry now.";
    }
    return error.message;
  }

  // Whether the Retry of an error (in the banner or the placeholder) has focus.
  function errorHasFocus() {
    return banner.contains(document.activeElement) || placeholder.contains(document.activeElement);
  }

  function showError(error) {
    const retry = h("button", { type: "button", class: "button", onclick: () => lookNow() }, "Retry");
    // A Retry pressed while the connection is still down fails again: the new Retry takes
    // its focus, which would otherwise fall to the page (a second press did nothing).
    const retried = errorHasFocus();
    if (!loaded) {
      list.hidden = true;
      showPlaceholder(
        "error",
        h("p", { role: "alert" }, h("strong", {}, "Operations could not be loaded. "), explain(error)),
        retry,
      );
    } else {
      replaceChildren(banner, h("span", {}, `Updates paused. ${explain(error)}`), retry);
      banner.hidden = false;
    }
    if (retried) retry.focus();
  }

  // Whether `a` comes after `b` in the list: the API's order, created_at then id, newest
  // first (fixed-width RFC 3339: the text orders as the time; ids compare as the database's).
  function isOlder(a, b) {
    return a.created_at < b.created_at || (a.created_at === b.created_at && a.id < b.id);
  }

  // The tail's copy of an operation the page has heard of anew: the list shows it again
  // from there at each look, and a stale copy would undo the change on its card.
  function keepInTail(operation) {
    const index = tailAt.get(operation.id);
    if (index !== undefined && operation.updated_at >= tail[index].updated_at) tail[index] = operation;
  }

  function setTail(operations) {
    tail = operations;
    tailAt = new Map(tail.map((operation, index) => [operation.id, index]));
  }

  // The tail once a look has read the head anew: what was shown past the head's new end, as
  // it was (a head pushed down by newer operations hands its oldest to the tail).
  function tailAfter(page, shownBefore) {
    const last = page.items.at(-1);
    if (!page.next_page_token || !last) {
      tailToken = null; // the head holds every one: nothing is older
      return [];
    }
    const inHead = new Set(page.items.map((operation) => operation.id));
    const kept = shownBefore.filter((operation) => !inHead.has(operation.id) && isOlder(operation, last));
    // The head now reaches past all the tail loaded (operations of this filter left it):
    // what is older than the head follows from the head's own token.
    if (kept.length === 0 && (!tailLast || !isOlder(tailLast, last))) {
      tailToken = page.next_page_token;
      tailLast = last;
    }
    return kept;
  }

  // `asked`: the page size the answer was asked with.
  function render(page, asked) {
    const retried = errorHasFocus(); // the load hides it
    loaded = true;
    banner.hidden = true;
    for (const card of unreachedOn) showCardError(card, "");
    unreachedOn.clear();
    section.setAttribute("aria-busy", "false");
    const shownBefore = [...head, ...tail];
    head = page.items;
    headToken = page.next_page_token;
    if (pagedPast) setTail(tailAfter(page, shownBefore));
    showList();
    if (olderToRestore && headToken) restoreOlder(olderToRestore);
    else scrollOnce();
    olderToRestore = 0;
    if (retried) focusLoaded();
    focusShownMore(asked);
    noticeFinished(page.items);
    announceCancelOutcomes(page.items);
  }

  // The cards of the head, then of the tail; the button that shows more, or older ones.
  function showList() {
    const items = [...head, ...tail];
    if (items.length === 0) {
      list.hidden = true;
      cards.clear();
      list.replaceChildren();
      if (filter.value !== "") {
        const showAll = h("button", { type: "button", class: "button", onclick: () => chooseFilter("") }, "Show all operations");
        showPlaceholder("empty", h("p", { class: "placeholder__title" }, "No operations in this state."), showAll);
      } else {
        showPlaceholder(
          "empty",
          h("p", { class: "placeholder__title" }, "No operations yet."),
          h("p", {}, "Work you start on a job posting or a CV, such as a strategy snapshot, appears here with its progress."),
          h("a", { class: "button", href: "/jobs" }, "Go to Jobs"),
        );
      }
    } else {
      placeholder.hidden = true;
      list.hidden = false;
      const seen = new Set();
      items.forEach((operation, index) => {
        seen.add(operation.id);
        let card = cards.get(operation.id);
        if (!card) {
          card = createCard(operation);
          cards.set(operation.id, card);
          showOnCard(card, operation);
        } else if (index < head.length || namedOn.get(card) !== nameFrom(names, operation.subject)) {
          // A tail card already shows its operation as last heard (`keepInTail`): only a
          // name come late changes it. Thousands of them are not redrawn at every look.
          showOnCard(card, operation);
        }
        if (list.children[index] !== card) list.insertBefore(card, list.children[index] ?? null);
      });
      for (const [id, card] of cards) {
        if (!seen.has(id)) {
          card.remove();
          cards.delete(id);
        }
      }
    }
    more.hidden = !(pagedPast ? tailToken : headToken);
    more.textContent = limit < PAGE_MAX ? "Show more" : "Show older";
  }

  function scrollOnce() {
    if (scrollBefore && list.children.length > 0) window.scrollTo(0, scrollBefore);
    scrollBefore = 0;
  }

  async function restoreOlder(count) {
    restoring = true;
    pagedPast = true;
    tailToken = headToken;
    tailLast = head.at(-1) ?? null;
    try {
      while (tailToken && tail.length < count) {
        if (!(await loadOlder(Math.min(OLDER_STEP, count - tail.length), false))) break;
      }
    } finally {
      restoring = false;
    }
    scrollOnce();
  }

  // "Show older": the next page after the last one shown, appended to the tail. A failure
  // says so beside the button, which stays (and keeps focus) to try again. Whether it
  // brought the page.
  async function loadOlder(size = OLDER_STEP, focus = true) {
    const epoch = tailEpoch;
    const query = new URLSearchParams({ page_size: String(size), page_token: tailToken });
    if (filter.value) query.set("state", filter.value);
    try {
      const page = await api(`/api/operations?${query}`);
      if (epoch !== tailEpoch) return false; // another filter was chosen meanwhile
      const last = tail.at(-1) ?? head.at(-1);
      const shown = new Set([...head, ...tail].map((operation) => operation.id));
      const brought = page.items.filter((operation) => !shown.has(operation.id) && (!last || isOlder(operation, last)));
      names = await namesOf([...head, ...tail, ...brought]);
      if (epoch !== tailEpoch) return false;
      setTail([...tail, ...brought]);
      tailToken = page.next_page_token;
      tailLast = page.items.at(-1) ?? tailLast;
      remember({ older: tail.length });
      olderFailed.hidden = true;
      showList();
      if (focus) focusShownOlder(brought[0]);
      followTail();
      return true;
    } catch (error) {
      if (epoch !== tailEpoch) return false;
      olderFailed.textContent = `Older operations could not be loaded. ${explain(error)}`;
      olderFailed.hidden = false;
      moreFocus = null;
      more.removeAttribute("aria-disabled");
      return false;
    }
  }

  // As after "Show more": focus on the first card brought, else the last card (the button
  // may be gone: nothing older), never the page.
  function focusShownOlder(first) {
    moreFocus = null;
    more.removeAttribute("aria-disabled");
    const card = (first && cards.get(first.id)) ?? list.lastElementChild;
    card?.querySelector(".op__title")?.focus();
  }

  // A live operation in the tail (retried here, say) is not read again by the looks: without
  // the stream, a long-poll follows it while one is free.
  function followTail() {
    if (liveOpen()) return;
    for (const operation of tail) if (isLive(operation)) follower.follow(operation);
  }

  // After a Retry that loaded the list, focus goes to what it shows (the first card's title,
  // else the empty list's action), not to the page.
  function focusLoaded() {
    const shown = list.hidden ? placeholder.querySelector("a, button") : list.querySelector(".op__title");
    shown?.focus();
  }

  // Focus on the first card "Show more" brought, once a load asked for them has answered:
  // the button may be gone (nothing more to show), and focus must not fall to the page.
  function focusShownMore(asked) {
    if (!moreFocus || moreFocus.older || asked < moreFocus.limit) return;
    const first = list.children[moreFocus.index] ?? list.lastElementChild;
    moreFocus = null;
    more.removeAttribute("aria-disabled");
    first?.querySelector(".op__title")?.focus();
  }

  // How a cancel asked for here ended, once it has: stopped, or too late.
  function announceCancelOutcomes(items) {
    for (const operation of items) {
      const name = cancelling.get(operation.id);
      if (name === undefined || !TERMINAL_STATES.has(operation.state)) continue;
      cancelling.delete(operation.id);
      announcer.textContent = cancelOutcome(name, operation);
    }
  }

  function cancelOutcome(name, operation) {
    if (operation.state === "cancelled") return `${name} cancelled.`;
    if (cancelCameTooLate(operation)) return `${name} succeeded: the cancel came too late, it had already finished.`;
    return `${name} ${stateLabel(operation).toLowerCase()}.`;
  }

  // A newly finished operation has a new notification: the bell and the list refresh
  // now, unless the tab's event stream is open (it brings the new count itself, and
  // the list follows the count). Newly finished: seen here in another state, or new
  // since the first look and already over (it ran between two polls).
  function noticeFinished(items) {
    const firstLook = !looked;
    looked = true;
    const finished = items.some((operation) => {
      if (!TERMINAL_STATES.has(operation.state)) return false;
      if (states.has(operation.id)) return states.get(operation.id) !== operation.state;
      return !firstLook && operation.created_at > newestSeen;
    });
    for (const operation of items) {
      states.set(operation.id, operation.state);
      if (operation.created_at > newestSeen) newestSeen = operation.created_at;
    }
    if (finished && !liveOpen()) notificationsChanged();
  }

  // The operation a link named: its card in the list, else one shown above the list.
  async function showTarget(items) {
    if (!target || cards.has(target)) {
      detail.hidden = true;
      replaceChildren(detail);
    }
    if (!target) return;
    if (cards.has(target)) {
      if (!targetShown) highlight(cards.get(target));
      targetShown = true;
      return;
    }
    let operation = items.find((item) => item.id === target);
    if (!operation) {
      try {
        operation = await api(`/api/operations/${encodeURIComponent(target)}`);
      } catch (error) {
        const text = error.status === 404 ? "The operation you opened is not among yours." : `The operation you opened could not be loaded. ${error.message}`;
        replaceChildren(detail, h("li", { class: "placeholder placeholder--error", role: "alert" }, text));
        detail.hidden = false;
        // Read again at the next poll: a list with the stream open and nothing live polls no more.
        if (error.status !== 404) loadWanted = true;
        return;
      }
      names = new Map([...names, ...(await subjectNames([operation.subject]))]);
    }
    let card = detail.querySelector(`#${CSS.escape(operationAnchor(target))}`);
    if (!card) {
      card = createCard(operation);
      replaceChildren(detail, card);
    }
    showOnCard(card, operation);
    detail.hidden = false;
    if (!targetShown) highlight(card);
    targetShown = true;
  }

  // Changes the stream told while a poll was on its way (it also tells those made just
  // before the page opened): that poll's answer may show them already, or a later version,
  // so each is looked at once the answer is shown, and only one newer than the answer's, or
  // of an operation it does not show, is shown or asks for another poll.
  let heardWhileLoading = null;

  // While the tab's stream is open it tells every change, so the list loads only when
  // asked (a change heard, even while hidden; an action; a filter) or while it shows
  // live work; without the stream it polls as ever. A failed load is asked for again.
  let loadWanted = true;
  let showsLive = false;

  function lookNow() {
    loadWanted = true;
    poller.refresh();
  }

  async function tick() {
    if (!loadWanted && !showsLive && liveOpen()) return OPERATIONS_POLL_MS;
    loadWanted = false;
    return load();
  }

  // A look when names that took long have come: the list never waits on them.
  async function namesOf(items) {
    const naming = subjectNames(items.map((operation) => operation.subject));
    let late = false;
    const waited = new Promise((resolve) =>
      setTimeout(() => {
        late = true;
        resolve(names);
      }, NAMES_WAIT_MS),
    );
    const found = await Promise.race([naming, waited]);
    if (late) naming.then(lookNow, () => {});
    return found;
  }

  // One poll; answers the delay before the next: short while any shown operation is live.
  async function load() {
    const asked = limit;
    const chosen = filter.value;
    const query = new URLSearchParams({ page_size: String(asked) });
    if (chosen) query.set("state", chosen);
    heardWhileLoading = [];
    try {
      const page = await api(`/api/operations?${query}`);
      names = await namesOf([...page.items, ...tail]);
      // Another filter was chosen while this answer was on its way (a slow connection): it
      // would show the operations of the filter left under the one chosen. The load the
      // choice asked for runs next.
      if (filter.value !== chosen) return OPERATIONS_POLL_MS;
      render(page, asked);
      await showTarget(page.items);
      const loaded = new Map(page.items.map((operation) => [operation.id, operation.updated_at]));
      for (const operation of heardWhileLoading) {
        const shown = loaded.get(operation.id); // fixed-width RFC 3339: the text orders as the time
        if (shown === undefined || operation.updated_at > shown) showChange(operation);
      }
      showsLive = page.items.some(isLive);
      followTail();
      const streamed = liveOpen();
      const unfollowed = page.items.filter((operation) => isLive(operation) && !streamed && !follower.follow(operation));
      return unfollowed.length > 0 ? OPERATIONS_LIVE_POLL_MS : OPERATIONS_POLL_MS;
    } catch (error) {
      showError(error);
      loadWanted = true;
      return OPERATIONS_POLL_MS;
    } finally {
      heardWhileLoading = null; // after a failure the next poll reads them all
    }
  }

  // As on /jobs: confirmed first; a dialog whose operation ends while it is open says
  // so, and a confirm that crossed the end on its way (409) reads as what it is.
  async function cancelOperation(operation) {
    const name = describe(operation);
    const confirmed = await cancels.confirm(operation.id, {
      name,
      title: "Cancel this operation?",
      message: `${name} will stop. Work that is already running stops at its next checkpoint.`,
      confirmLabel: "Cancel operation",
      focusFallback: () => {
        const card = cardOf(operation.id);
        return card ? focusTarget(card) : null;
      },
    });
    if (!confirmed) return;
    const tooLate = `${name} had already finished: there was nothing left to stop.`;
    await act(operation, "cancel", (updated) => {
      if (TERMINAL_STATES.has(updated.state)) return cancelOutcome(name, updated);
      cancelling.set(updated.id, name);
      return `Cancel requested for ${name}.`;
    }, tooLate);
  }

  async function retryOperation(operation) {
    // A retry removes the operation's old notification.
    if (await act(operation, "retry", () => `${describe(operation)} queued again.`)) notificationsChanged();
  }

  // `conflict` is what a 409 means for this action: the operation was not in a state for it.
  // The second click of a double click, while the first one's request is on its way, asks nothing.
  // Its button says it is busy until the answer comes (aria-disabled, as on /jobs: `disabled`
  // would drop its focus to the page); a slow answer otherwise looked like a click lost.
  async function act(operation, action, message, conflict = "This operation's state changed; the list is updated.") {
    const key = `${operation.id}:${action}`;
    if (acting.has(key)) return false;
    acting.add(key);
    const card = cardOf(operation.id);
    const button = card?.querySelector(`.op__actions button[data-action="${action}"]`);
    button?.setAttribute("aria-disabled", "true");
    try {
      const updated = await post(`/api/operations/${encodeURIComponent(operation.id)}/${action}`);
      if (card) {
        showCardError(card, "");
        unreachedOn.delete(card);
        showOnCard(card, updated);
        card.querySelector(".op__actions button, .op__title")?.focus?.();
      }
      announcer.textContent = message(updated);
      return true;
    } catch (error) {
      const text = error.status === 409 ? conflict : error.message;
      if (card) {
        showCardError(card, text);
        if (error.status === 0) unreachedOn.add(card);
        else unreachedOn.delete(card);
      }
      return false;
    } finally {
      acting.delete(key);
      button?.removeAttribute("aria-disabled");
      lookNow();
    }
  }

  showPlaceholder("loading", h("span", { class: "spinner", "aria-hidden": "true" }), h("p", {}, "Loading operations…"));
  list.hidden = true;

  // A new filter shows its first page afresh (or, stepped back to, as long as it was).
  function applyFilter(shown = PAGE_STEP) {
    limit = shown;
    olderToRestore = 0;
    pagedPast = false;
    setTail([]);
    tailToken = null;
    tailLast = null;
    tailEpoch += 1;
    olderFailed.hidden = true;
    moreFocus = null;
    more.removeAttribute("aria-disabled");
    loaded = false;
    section.setAttribute("aria-busy", "true");
    lookNow();
  }

  function chooseFilter(state) {
    filter.value = state;
    window.history.pushState(null, "", urlWithFilter(state));
    applyFilter();
    filter.focus(); // the button that chose it is gone with the placeholder
  }

  filter.value = filterFromUrl();
  const asked = new URLSearchParams(window.location.search).get("state");
  if (asked !== null && asked !== filter.value) window.history.replaceState(null, "", urlWithFilter("")); // an unknown state: all
  filter.addEventListener("change", () => {
    window.history.pushState(null, "", urlWithFilter(filter.value));
    applyFilter();
  });
  window.addEventListener("popstate", () => {
    if (filter.value === filterFromUrl()) return; // a move between #operation- links
    filter.value = filterFromUrl();
    applyFilter(shownBefore());
  });
  window.addEventListener("pagehide", () => remember({ scrollY: window.scrollY }));
  window.addEventListener("hashchange", () => {
    if (window.location.hash === NOTIFICATIONS_HASH) showNotifications();
    target = targetFromHash();
    targetShown = false;
    lookNow();
  });
  // One page more per intent: the second click of a double click, or a click while the
  // page it asked for is on its way (`moreFocus` until a load brings it), loaded two.
  more.addEventListener(
    "click",
    once(() => {
      if (moreFocus || restoring) return;
      if (limit >= PAGE_MAX) {
        moreFocus = { older: true };
        more.setAttribute("aria-disabled", "true");
        if (!pagedPast) {
          pagedPast = true;
          tailToken = headToken;
          tailLast = head.at(-1) ?? null;
        }
        loadOlder();
        return;
      }
      moreFocus = { index: list.children.length, limit: Math.min(PAGE_MAX, limit + PAGE_STEP) };
      limit = moreFocus.limit;
      remember({ shown: limit });
      more.setAttribute("aria-disabled", "true");
      lookNow();
    }),
  );

  // A move is shown on its card at once; the end reloads the list (its notification,
  // the announcement of a cancel's outcome).
  const follower = createFollower({
    onMove(operation) {
      const card = cards.get(operation.id);
      if (card) showOnCard(card, operation);
    },
    onEnd() {
      lookNow();
    },
    onFail() {
      lookNow();
    },
  });
  // The stream's changes: a move on its card at once; an end (its notification, a
  // cancel's outcome) or an operation the list does not show yet reloads the list.
  window.addEventListener(LIVE_OPERATION, (event) => {
    const { operation } = event.detail;
    if (heardWhileLoading) heardWhileLoading.push(operation);
    else showChange(operation);
  });
  // The stream open again: what changed while it was away may not have reached the list (a
  // stream started anew tells only what changes from now), and an idle list does not poll.
  window.addEventListener(LIVE_OPENED, (event) => {
    if (event.detail?.reopened) lookNow();
  });
  function showChange(operation) {
    const shown = cards.get(operation.id);
    const kept = tail[tailAt.get(operation.id)];
    if (shown && kept) {
      // The looks do not read the tail again: its card shows the change itself, an end too.
      if (operation.updated_at < kept.updated_at) return; // told late: the card shows newer
      showOnCard(shown, operation);
      noticeFinished([operation]);
      announceCancelOutcomes([operation]);
    } else if (shown && !TERMINAL_STATES.has(operation.state)) {
      showOnCard(shown, operation);
    } else {
      if (TERMINAL_STATES.has(operation.state)) cancels.ended(operation.id); // before the list reloads
      lookNow();
    }
  }
  const poller = visiblePoller(tick, OPERATIONS_POLL_MS);
}
