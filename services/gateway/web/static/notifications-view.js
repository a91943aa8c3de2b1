// The notification list: each names its task type and subject (the notification
// keeps only the operation's id; the page reads the rest) and links to its operation
// and, for a success, to the result; read one, read all, dismiss, then tell the bell
// (NOTIFICATIONS_CHANGED). Its buttons and links are named after their notification's
// subject and time: a list of "Mark read: Strategy snapshot is ready" tells nothing apart.

import { api, post } from "./api.js";
import { unreadShown } from "./bell.js";
import { LIVE_OPENED, LIVE_UNREAD } from "./live.js";
import { h, replaceChildren } from "./dom.js";
import { NOTIFICATIONS_CHANGED, UNREAD_COUNT, notificationsChanged } from "./events.js";
import { formatTime, subjectLabel, taskLabel } from "./format.js";
import { operationAnchor, resultHref } from "./operations-view.js";
import { visiblePoller } from "./poller.js";
import { shownName, subjectName } from "./subjects.js";

// A list that could not load (the connection dropped), or loaded without what a notification
// is about (its operation's read failed), is asked for again this often while the page is
// shown, until it loads whole: nothing else would ask (the bell's count may not move).
export const NOTIFICATIONS_RETRY_MS = 5000;

const operations = new Map(); // id -> Promise<operation | null>: its task and subject never change

// An operation that could not be read answers null; one the server could not be reached for
// (a dropped connection, a 5xx), `UNREACHED`: its notification is read again later.
const UNREACHED = Symbol("unreached");

function operationOf(id) {
  if (!id) return Promise.resolve(null);
  if (!operations.has(id)) {
    operations.set(
      id,
      api(`/api/operations/${encodeURIComponent(id)}`).catch((error) => {
        operations.delete(id);
        return error.status === 0 || error.status >= 500 ? UNREACHED : null;
      }),
    );
  }
  return operations.get(id);
}

// The operations a user's notifications are about are, for one of many operations, among
// their newest: one read of the newest hundred names them together, where a read of each
// made /operations send 50 requests as it opened (a user of 80 finished analyses), queued
// behind one another on the browser's few connections. Fewer than READ_TOGETHER_FROM
// unknown ones are read apart, as before; any the hundred do not hold, too.
const READ_TOGETHER_FROM = 3;
const READ_TOGETHER_PAGE = 100;

async function readTogether(ids) {
  const unknown = new Set(ids.filter((id) => id && !operations.has(id)));
  if (unknown.size < READ_TOGETHER_FROM) return;
  try {
    const page = await api(`/api/operations?page_size=${READ_TOGETHER_PAGE}`);
    for (const operation of page.items) {
      if (!operations.has(operation.id)) operations.set(operation.id, Promise.resolve(operation));
    }
  } catch {
    // Each is read apart.
  }
}

// What the notification is about and where it leads, once its operation is read.
// `unreached`: its operation could not be read for now (no name, no result link yet).
async function detailsOf(notification) {
  const read = await operationOf(notification.operation_id);
  const operation = read === UNREACHED ? null : read;
  const name = operation ? await subjectName(operation.subject) : null;
  const result = operation && notification.outcome === "succeeded" ? resultHref({ ...operation, state: "succeeded" }) : null;
  return { name, result, subject: operation?.subject ?? null, unreached: read === UNREACHED };
}

// The stored line says where to look ("Open your operations to see it."), which reads
// oddly on the operations page itself, the one page that lists notifications: here a
// notification with an operation says what its links lead to instead, by outcome.
const LINES_HERE = {
  succeeded: null, // "View the result" says it
  failed: "Open the operation to retry it.",
  cancelled: "Open the operation to retry it.",
};

function lineOf(notification) {
  if (!notification.operation_id || !(notification.outcome in LINES_HERE)) return notification.body;
  return LINES_HERE[notification.outcome];
}

// The list reads its newest PAGE_SIZE and, for each "Show older" asked, the next as many
// (the API's page token), all of them again at each load: a load comes with a change of the
// notifications, not on a timer, and a reader who paged back keeps what they paged to.
const PAGE_SIZE = 50;

async function newestPages(count) {
  const items = [];
  let token = "";
  for (let read = 0; read < count; read += 1) {
    const query = new URLSearchParams({ page_size: String(PAGE_SIZE) });
    if (token) query.set("page_token", token);
    const page = await api(`/api/notifications?${query}`);
    items.push(...page.items);
    token = page.next_page_token ?? "";
    if (!token) break;
  }
  return { items, more: token !== "" };
}

export function mountNotifications(section) {
  const heading = h("h2", { id: "notifications-heading", tabindex: "-1" }, "Notifications");
  const readAll = h("button", { type: "button", class: "button button--quiet", hidden: true }, "Mark all read");
  const status = h("p", { class: "status", role: "status" });
  const list = h("ul", { class: "notes", "aria-labelledby": "notifications-heading" });
  const older = h("button", { type: "button", class: "button button--quiet", hidden: true }, "Show older notifications");
  section.setAttribute("aria-labelledby", "notifications-heading");
  replaceChildren(section, h("div", { class: "notes__head" }, heading, readAll), status, list, older);
  let pages = 1; // read at each load: 1, and one more for each "Show older"
  let firstOlder = null; // after "Show older": the index of the first it brings, to focus
  let unread = null; // of those listed
  let loading = null;
  let failed = false; // the last load failed, or read a notification's operation it could not
  const acting = new Set(); // notifications with a mark or dismiss on its way: one at a time
  // The status saying the server could not be reached, while it says so: a later load of the
  // list that answers makes it untrue, and it is cleared (it stayed until the next action).
  let unreachedSaid = null;

  function sayFailure(text, error) {
    status.textContent = `${text} ${error.message}`;
    unreachedSaid = error.status === 0 ? {} : null;
    // Unanswered, the change may still have reached the server: the list reads again, as
    // after a failed load, and that load's answer clears this once the connection is back.
    if (error.status === 0) failed = true;
  }

  function say(text) {
    status.textContent = text;
    unreachedSaid = null;
  }

  // Once the list has loaded again, focus goes on where the reader was: to the next
  // notification's first control (the one before it, for the last), the heading once none
  // is left. The second click of a double click, while the first one's request is on its
  // way, asks nothing: a second dismiss would find the notification gone and say it failed.
  async function act(notification, action) {
    if (acting.has(notification.id)) return;
    acting.add(notification.id);
    const item = itemOf(notification.id);
    const near = [item?.nextElementSibling, item?.previousElementSibling].map((other) => other?.dataset.id).filter(Boolean);
    try {
      await post(`/api/notifications/${encodeURIComponent(notification.id)}/${action}`);
    } catch (error) {
      if (error.status === 404) {
        // Dismissed in another tab, whose list this one had not read again: not a failure.
        say("That notification had already been dismissed.");
        reload();
        return;
      }
      sayFailure("The notification could not be updated.", error);
      return;
    } finally {
      acting.delete(notification.id);
    }
    say(action === "dismiss" ? "Notification dismissed." : "Notification marked as read.");
    focusAfterLoad = { ids: near, control: 0 };
    notificationsChanged(); // the list loads again (reload)
  }

  function itemOf(id) {
    return [...list.children].find((shown) => shown.dataset.id === id) ?? null;
  }

  // Where focus goes once the list is drawn again: the `control`th control of the first of
  // `ids` still listed, else the heading. A reload for any other reason (the unread count
  // moved) keeps focus on the control it was on.
  let focusAfterLoad = null;
  function focusWhereItWas() {
    const active = document.activeElement;
    const item = list.contains(active) ? active.closest("li") : null;
    if (!focusAfterLoad && item?.dataset.id) {
      focusAfterLoad = { ids: [item.dataset.id], control: [...item.querySelectorAll("a, button")].indexOf(active) };
    }
    return () => {
      const wanted = focusAfterLoad;
      focusAfterLoad = null;
      if (!wanted) return;
      const shown = wanted.ids.map(itemOf).find(Boolean);
      const controls = shown ? [...shown.querySelectorAll("a, button")] : [];
      (controls[wanted.control] ?? controls[0] ?? heading).focus();
    };
  }

  // One at a time too: a double click's second answer would say "0 notifications marked as read."
  let markingAll = false;
  readAll.addEventListener("click", async () => {
    if (markingAll) return;
    markingAll = true;
    try {
      const { marked } = await post("/api/notifications/read-all");
      say(marked === 1 ? "One notification marked as read." : `${marked} notifications marked as read.`);
    } catch (error) {
      sayFailure("The notifications could not be marked as read.", error);
      return;
    } finally {
      markingAll = false;
    }
    notificationsChanged();
    heading.focus();
  });

  // "Strategy snapshot is ready (Platform engineer at Acme, 6 Dec 2026, 11:22)", or by
  // the subject's reference ("job job-42") when its name cannot be read.
  function which(notification, details) {
    const about = [subjectLabel(details.subject, details.name), formatTime(notification.created_at)].filter(Boolean).join(", ");
    return about ? `${notification.title} (${about})` : notification.title;
  }

  function links(notification, details, name) {
    return [
      notification.operation_id
        ? h(
            "a",
            { class: "note__link", href: `/operations#${operationAnchor(notification.operation_id)}`, "aria-label": `Open the operation: ${name}` },
            "Open the operation",
          )
        : null,
      details.result ? h("a", { class: "note__link", href: details.result, "aria-label": `View the result: ${name}` }, "View the result") : null,
    ];
  }

  function item(notification, details) {
    const isUnread = notification.read_at === null;
    const name = which(notification, details);
    const line = lineOf(notification);
    // The subject's name is user text: it sets its own direction (an Arabic file name).
    const about = details.name ? [`${taskLabel(notification.task_type)} for `, shownName("span", {}, details.name)] : taskLabel(notification.task_type);
    return h(
      "li",
      { class: `note${isUnread ? " note--unread" : ""}`, dataset: { id: notification.id } },
      h(
        "div",
        { class: "note__text" },
        h(
          "p",
          { class: "note__title" },
          isUnread ? h("span", { class: "note__dot" }, h("span", { class: "visually-hidden" }, "Unread: ")) : null,
          notification.title,
        ),
        h("p", { class: "note__about" }, about),
        line ? h("p", { class: "note__body" }, line) : null,
        h("p", { class: "note__links" }, links(notification, details, name)),
        h("time", { class: "note__time", datetime: notification.created_at }, formatTime(notification.created_at)),
      ),
      h(
        "div",
        { class: "note__actions" },
        isUnread
          ? h(
              "button",
              { type: "button", class: "button button--quiet", "aria-label": `Mark read: ${name}`, onclick: () => act(notification, "read") },
              "Mark read",
            )
          : null,
        h(
          "button",
          { type: "button", class: "button button--quiet", "aria-label": `Dismiss: ${name}`, onclick: () => act(notification, "dismiss") },
          "Dismiss",
        ),
      ),
    );
  }

  async function load() {
    const said = unreachedSaid; // said before this load was sent: its answer makes it untrue
    try {
      const { items, more } = await newestPages(pages);
      if (said !== null && unreachedSaid === said) say("");
      await readTogether(items.map((notification) => notification.operation_id));
      const details = await Promise.all(items.map(detailsOf));
      const refocus = focusWhereItWas();
      // Its name and result link, or a status this load was sent too early to clear: later.
      failed = details.some((detail) => detail.unreached) || unreachedSaid !== null;
      unread = items.filter((n) => n.read_at === null).length;
      showReadAll();
      older.hidden = !more;
      list.setAttribute("aria-busy", "false");
      if (items.length === 0) {
        replaceChildren(list, h("li", { class: "empty" }, "No notifications. You will see one here when work you start on ", h("a", { href: "/jobs" }, "Jobs"), " finishes."));
      } else {
        replaceChildren(list, items.map((notification, index) => item(notification, details[index])));
      }
      refocus();
      if (firstOlder !== null) {
        // The first older one brought, or the last listed when none came (another tab
        // dismissed them meanwhile): focus stays in the list, past what was read.
        const brought = list.children[firstOlder] ?? list.lastElementChild;
        brought?.querySelector("a, button")?.focus();
        firstOlder = null;
      }
    } catch (error) {
      failed = true;
      const hadFocus = focusAfterLoad || firstOlder !== null || list.contains(document.activeElement);
      focusAfterLoad = null;
      firstOlder = null; // the retry reads the older ones too, and leaves focus where it is
      replaceChildren(list, h("li", { class: "empty" }, `Notifications could not be loaded. ${error.message}`));
      if (hadFocus) heading.focus();
    }
  }

  // For an unread one listed, or any the bell counts: a user whose newest are read may have
  // older unread ones, which "Mark all read" reads too (it was hidden while the bell said 99+).
  function showReadAll() {
    readAll.hidden = Math.max(unread ?? 0, unreadShown() ?? 0) === 0;
  }

  older.addEventListener("click", () => {
    if (firstOlder !== null) return; // its load is on its way
    firstOlder = list.children.length;
    pages += 1;
    reload();
  });

  // Asks made while a load waits to be sent are that load: it reads what they ask for.
  let queued = null;
  function reload() {
    if (queued) return queued;
    queued = (loading ?? Promise.resolve()).then(() => {
      queued = null;
      return load();
    });
    loading = queued;
    return loading;
  }

  list.setAttribute("aria-busy", "true");
  replaceChildren(list, h("li", { class: "empty" }, "Loading notifications…"));
  window.addEventListener(NOTIFICATIONS_CHANGED, reload);
  // Until the first load answers, its fresh list makes a count change moot.
  window.addEventListener(UNREAD_COUNT, (event) => {
    showReadAll();
    if (unread !== null && event.detail.count !== unread) reload();
  });
  // The stream tells the count after every change of a tab's (`unread`), the same count
  // too: a read notification dismissed in another tab changes no count, and the list showed
  // it until the page was reloaded (acting on it then said "Notification not found"). The
  // count it tells as it first opens is the one the list's first load reads; a stream opened
  // again (the tab hidden, the connection dropped) tells one after changes this list missed.
  let opening = false;
  window.addEventListener(LIVE_OPENED, (event) => {
    opening = !event.detail?.reopened;
  });
  window.addEventListener(LIVE_UNREAD, () => {
    if (opening) opening = false;
    else if (unread !== null) reload();
  });
  reload();
  visiblePoller(() => (failed ? reload() : null), NOTIFICATIONS_RETRY_MS);
  return { reload };
}
