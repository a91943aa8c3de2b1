// The bell: unread count as badge and accessible name; it leads to the notifications
// (/operations#notifications). While the tab's event stream (live.js) is open, the
// count comes from it, at once. Otherwise the bell asks ONLY for
// /api/notifications/unread-count, every `intervalMs` while the page is shown: the
// fallback. It asks at once, stream or not, when this page changed notifications
// (NOTIFICATIONS_CHANGED): its own change is shown without waiting for the stream.
// That forced look, when it fails, is tried again every BELL_RETRY_MS until it answers:
// with the stream open nothing else would ask, and the stream may never tell this change
// (made through another gateway replica, it tells it at its 30-s refresh at best).

import { api } from "./api.js";
import { NOTIFICATIONS_CHANGED, UNREAD_COUNT } from "./events.js";
import { LIVE_UNREAD, liveOpen } from "./live.js";
import { visiblePoller } from "./poller.js";

export const BELL_RETRY_MS = 5000;

// The count the bell shows (null until known), for a part of the page that started after
// its UNREAD_COUNT was told (the notification list's "Mark all read").
let shown = null;

export function unreadShown() {
  return shown;
}

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
  let asked = true; // the first look, and a change this page made
  function counted(count) {
    shown = count;
    if (count !== last) {
      last = count;
      window.dispatchEvent(new CustomEvent(UNREAD_COUNT, { detail: { count } }));
    }
    show(bell, count);
  }
  const poller = visiblePoller(async () => {
    if (!asked && liveOpen()) return; // the stream tells every change
    const forced = asked;
    asked = false;
    try {
      counted((await api("/api/notifications/unread-count")).count);
    } catch {
      show(bell, last);
      if (forced) {
        asked = true;
        return Math.min(BELL_RETRY_MS, intervalMs);
      }
    }
    return intervalMs;
  }, intervalMs);
  window.addEventListener(NOTIFICATIONS_CHANGED, () => {
    asked = true;
    poller.refresh();
  });
  window.addEventListener(LIVE_UNREAD, (event) => counted(event.detail.unread));
  return poller;
}
