// Follows live operations with the gateway's long-poll instead of polling them:
// `GET /api/operations/{id}:wait?seen=<updated_at>` answers as soon as the
// operation moves (state, progress, a cancel request) or ends, else after
// WAIT_SECONDS with the operation as it is.
//
// A browser keeps about six connections per server over HTTP/1.1, so at most
// MAX_FOLLOWED long-polls are open at once: the others, and any whose long-poll
// failed, are left to the page's polling (`isFollowed` says which are not).
// Hidden pages hold no long-poll open; the page's poller starts them again.

import { api } from "./api.js";
import { TERMINAL_STATES } from "./format.js";

export const WAIT_SECONDS = 25;
export const MAX_FOLLOWED = 3;
// After a failed long-poll (a 503, a dropped connection) that operation is polled
// for this long before the long-poll is tried again.
export const REST_AFTER_FAILURE_MS = 10000;

// onMove(operation): it moved (the end included); onEnd(operation): it ended;
// onFail(operation): its long-poll failed, so the page should poll it from now.
export function createFollower({ onMove, onEnd, onFail }) {
  const followed = new Map(); // operation id -> AbortController
  const resting = new Map(); // operation id -> when its long-poll may be tried again

  function waitPath(operation) {
    const query = new URLSearchParams({ timeout: String(WAIT_SECONDS), seen: operation.updated_at });
    return `/api/operations/${encodeURIComponent(operation.id)}:wait?${query}`;
  }

  async function run(operation, controller) {
    let current = operation;
    try {
      while (!TERMINAL_STATES.has(current.state)) {
        current = await api(waitPath(current), { signal: controller.signal });
        if (controller.signal.aborted) return;
        onMove(current);
      }
      onEnd(current);
    } catch (error) {
      if (error.name !== "AbortError") {
        resting.set(operation.id, Date.now() + REST_AFTER_FAILURE_MS);
        console.warn("long-poll stopped; polling instead", error);
        if (followed.get(operation.id) === controller) followed.delete(operation.id);
        onFail(current);
      }
    } finally {
      if (followed.get(operation.id) === controller) followed.delete(operation.id);
    }
  }

  function stopAll() {
    for (const controller of followed.values()) controller.abort();
    followed.clear();
  }

  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState !== "visible") stopAll();
  });
  window.addEventListener("pagehide", stopAll);

  return {
    // Follow this live operation unless it is followed already, the page is hidden,
    // or MAX_FOLLOWED are open; answers whether it is followed now.
    follow(operation) {
      if (followed.has(operation.id)) return true;
      if (TERMINAL_STATES.has(operation.state) || !operation.updated_at) return false;
      if (document.visibilityState !== "visible" || followed.size >= MAX_FOLLOWED) return false;
      if ((resting.get(operation.id) ?? 0) > Date.now()) return false;
      resting.delete(operation.id);
      const controller = new AbortController();
      followed.set(operation.id, controller);
      run(operation, controller);
      return true;
    },
    isFollowed(operationId) {
      return followed.has(operationId);
    },
    stop(operationId) {
      followed.get(operationId)?.abort();
      followed.delete(operationId);
    },
    stopAll,
  };
}
