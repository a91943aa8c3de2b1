// Local events that keep separate parts of the page in step without a round trip.

export const NOTIFICATIONS_CHANGED = "notifications:changed";
export const UNREAD_COUNT = "notifications:unread-count";
export const AUTH_EXPIRED = "auth:expired";

export function notificationsChanged() {
  window.dispatchEvent(new CustomEvent(NOTIFICATIONS_CHANGED));
}
