// Local events that keep separate parts of the page in step without a round trip.

export const NOTIFICATIONS_CHANGED = "notifications:changed";
export const UNREAD_COUNT = "notifications:unread-count";
export const AUTH_EXPIRED = "auth:expired";
// An analysis of the user's started or ended: today's token budget moved (a reservation
// taken, or settled into what was spent).
export const BUDGET_CHANGED = "budget:changed";

export function notificationsChanged() {
  window.dispatchEvent(new CustomEvent(NOTIFICATIONS_CHANGED));
}

export function budgetChanged() {
  window.dispatchEvent(new CustomEvent(BUDGET_CHANGED));
}
