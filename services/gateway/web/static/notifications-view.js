// The notification list: read and dismiss, then tell the bell (NOTIFICATIONS_CHANGED).

import { api, post } from "./api.js";
import { h, replaceChildren } from "./dom.js";
import { NOTIFICATIONS_CHANGED, UNREAD_COUNT, notificationsChanged } from "./events.js";
import { formatTime } from "./format.js";

export function mountNotifications(section) {
  const heading = h("h2", { id: "notifications-heading", tabindex: "-1" }, "Notifications");
  const status = h("p", { class: "status", role: "status" });
  const list = h("ul", { class: "notes", "aria-labelledby": "notifications-heading" });
  section.setAttribute("aria-labelledby", "notifications-heading");
  replaceChildren(section, heading, status, list);
  let unread = null;
  let loading = null;

  async function act(notification, action) {
    try {
      await post(`/api/notifications/${encodeURIComponent(notification.id)}/${action}`);
    } catch (error) {
      status.textContent = `Could not update the notification: ${error.message}`;
      return;
    }
    status.textContent = action === "dismiss" ? "Notification dismissed." : "Notification marked as read.";
    notificationsChanged();
    heading.focus();
  }

  function item(notification) {
    const isUnread = notification.read_at === null;
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
        notification.body ? h("p", { class: "note__body" }, notification.body) : null,
        h("time", { class: "note__time", datetime: notification.created_at }, formatTime(notification.created_at)),
      ),
      h(
        "div",
        { class: "note__actions" },
        isUnread
          ? h(
              "button",
              { type: "button", class: "button button--quiet", "aria-label": `Mark read: ${notification.title}`, onclick: () => act(notification, "read") },
              "Mark read",
            )
          : null,
        h(
          "button",
          { type: "button", class: "button button--quiet", "aria-label": `Dismiss: ${notification.title}`, onclick: () => act(notification, "dismiss") },
          "Dismiss",
        ),
      ),
    );
  }

  async function load() {
    try {
      const page = await api("/api/notifications?page_size=50");
      unread = page.items.filter((n) => n.read_at === null).length;
      list.setAttribute("aria-busy", "false");
      if (page.items.length === 0) {
        replaceChildren(list, h("li", { class: "empty" }, "No notifications. You will see one here when an operation finishes."));
      } else {
        replaceChildren(list, page.items.map(item));
      }
    } catch (error) {
      replaceChildren(list, h("li", { class: "empty" }, `Notifications could not be loaded: ${error.message}`));
    }
  }

  function reload() {
    loading = (loading ?? Promise.resolve()).then(load);
    return loading;
  }

  list.setAttribute("aria-busy", "true");
  replaceChildren(list, h("li", { class: "empty" }, "Loading notifications…"));
  window.addEventListener(NOTIFICATIONS_CHANGED, reload);
  // Until the first load answers, its fresh list makes a count change moot.
  window.addEventListener(UNREAD_COUNT, (event) => {
    if (unread !== null && event.detail.count !== unread) reload();
  });
  reload();
  return { reload };
}
