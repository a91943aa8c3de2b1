// The bell: unread count as badge and accessible name. It asks ONLY for
// /api/notifications/unread-count, every `intervalMs` while the page is shown,
// and at once when this page changed notifications (NOTIFICATIONS_CHANGED).

import { api } from "./api.js";
import { NOTIFICATIONS_CHANGED, UNREAD_COUNT } from "./events.js";
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
  const poller = visiblePoller(async () => {
    try {
      const { count } = await api("/api/notifications/unread-count");
      if (count !== last) {
        last = count;
        window.dispatchEvent(new CustomEvent(UNREAD_COUNT, { detail: { count } }));
      }
      show(bell, count);
    } catch {
      show(bell, last);
    }
  }, intervalMs);
  window.addEventListener(NOTIFICATIONS_CHANGED, () => poller.refresh());
  return poller;
}
