// The bell: unread count as badge and accessible name. It asks ONLY for
// /api/notifications/unread-count, every `intervalMs` while the page is shown,
// and at once when this page changed notifications (NOTIFICATIONS_CHANGED); the
// tab's event stream (live.js) tells it every change in between, at once.

import { api } from "./api.js";
import { NOTIFICATIONS_CHANGED, UNREAD_COUNT } from "./events.js";
import { LIVE_UNREAD } from "./live.js";
import { visiblePoller } from "./poller.js";

export function bellLabel(count) {
  if (count === null) return "Notifications";
  if (count === 0) return "Notifications, none unread";
  return `Notifications, ${count} unread`;
}

function show(bell, count) {
  const badge = bell.querySelector(".bell__badge");
  bell.setAttribute("aria-label", bellLabel(count));
  bell.classList.toggle("bell--unread", Boolean(count));
  badge.textContent = count > 99 ? "99+" : String(count ?? "");
  badge.hidden = !count;
}

export function startBell(bell, intervalMs) {
  let last = null;
  function counted(count) {
    if (count !== last) {
      last = count;
      window.dispatchEvent(new CustomEvent(UNREAD_COUNT, { detail: { count } }));
    }
    show(bell, count);
  }
  const poller = visiblePoller(async () => {
    try {
      counted((await api("/api/notifications/unread-count")).count);
    } catch {
      show(bell, last);
    }
  }, intervalMs);
  window.addEventListener(NOTIFICATIONS_CHANGED, () => poller.refresh());
  window.addEventListener(LIVE_UNREAD, (event) => counted(event.detail.unread));
  return poller;
}
