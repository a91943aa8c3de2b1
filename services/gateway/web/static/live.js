// One event stream per tab (GET /api/events): the caller's operation changes, with
// the answer a running analysis has written so far, and the unread count. Each is
// re-dispatched on `window` (LIVE_OPERATION, LIVE_UNREAD) for the parts of the page
// that show them. The browser reconnects by itself and sends the last event id, so
// nothing is missed across a drop. While the stream is not open (refused, dropped,
// or no EventSource), `liveOpen()` is false and the pages poll as they always did:
// nothing is said about it. A stream whose sign-in ended (logout in any tab, a
// revocation, expiry) says so last (`signed_out`): the tab reacts as to a 401 (app.js).
//
// Only a shown tab holds its stream for long. A browser keeps six connections per server
// over HTTP/1.1 (what `opsctl up` serves), and each open stream holds one: with five tabs
// of the product open, a sixth could not even load its page. A tab hidden (another tab of
// the window chosen, the window minimised) for PARK_AFTER_MS closes its stream, and one
// opened in the background opens none; shown again, it opens one anew, and what it shows
// is read again (its pollers run at once, and the new stream's `reopened` asks the pages
// to look again: on /jobs a read of every card). A glance at another tab and back within
// PARK_AFTER_MS keeps the stream, and reads nothing again.
export const PARK_AFTER_MS = 20000;

import { pageUser } from "./api.js";
import { AUTH_EXPIRED } from "./events.js";

export const LIVE_OPERATION = "live:operation";
export const LIVE_UNREAD = "live:unread";
export const LIVE_OPENED = "live:opened";

let source = null;
let opens = 0;
let starts = 0;
// The browser reopens a stream that dropped, but closes one the gateway refused (an HTTP
// error: a proxy's 502 on a bad connection, a 503 while a service is down) for good, and
// the tab would poll until reloaded. A refused stream is opened again when the tab is shown
// again or the browser is back online: the moments a bad spell has likely passed.
let refused = false;
// Closed (or never opened) because the tab is hidden: opened when it is shown.
let parked = false;
let parking = null; // the timer that parks a hidden tab's stream

export function liveOpen() {
  return source !== null && source.readyState === EventSource.OPEN;
}

function relay(name, event) {
  let detail;
  try {
    detail = JSON.parse(event.data);
  } catch {
    return;
  }
  window.dispatchEvent(new CustomEvent(name, { detail }));
}

// The user the page is for, as every request of the page says it (api.js): an EventSource
// sends no header of its choosing, so it goes in the query. A stream the gateway refuses for
// another user (409 `page_user_changed`) is closed by the browser for good; a later start
// opens a new one.
function eventsUrl() {
  const user = pageUser();
  return user ? `/api/events?${new URLSearchParams({ page_user: user })}` : "/api/events";
}

export function startLive() {
  if (typeof EventSource !== "function") return;
  if (source !== null && source.readyState !== EventSource.CLOSED) return;
  refused = false;
  if (document.visibilityState === "hidden") {
    parked = true;
    return;
  }
  parked = false;
  starts += 1;
  const opened = new EventSource(eventsUrl());
  source = opened;
  opened.addEventListener("error", () => {
    if (opened.readyState === EventSource.CLOSED) refused = true; // not by close(): no error then
  });
  // `reopened`: open again after a drop, when what it told meanwhile may not all have
  // reached the page (a read it asked for failed while the gateway was away); or a stream
  // started again (after a refusal, a sign-in anew), which tells only what changes from now.
  source.addEventListener("open", () => {
    opens += 1;
    window.dispatchEvent(new CustomEvent(LIVE_OPENED, { detail: { reopened: opens > 1 || starts > 1 } }));
  });
  source.addEventListener("operation", (event) => relay(LIVE_OPERATION, event));
  source.addEventListener("unread", (event) => relay(LIVE_UNREAD, event));
  // Closed for good, not stopped: a tab that kept its typed text (app.js) opens a stream
  // again once the user has signed in anew.
  source.addEventListener("signed_out", () => {
    source.close();
    source = null;
    window.dispatchEvent(new CustomEvent(AUTH_EXPIRED));
  });
  // Pollers stop on pagehide; so does the stream (a restored page reloads, app.js).
  window.addEventListener("pagehide", stopLive, { once: true });
}

export function stopLive() {
  parked = false; // the tab is leaving (or signing out): showing it again opens nothing
  source?.close();
}

function reopenRefused() {
  if (refused && source?.readyState === EventSource.CLOSED && document.visibilityState === "visible") startLive();
}

function park() {
  parking = null;
  if (document.visibilityState !== "hidden") return;
  if (source !== null && source.readyState !== EventSource.CLOSED) {
    source.close();
    parked = true;
  }
}

function onVisibility() {
  clearTimeout(parking);
  parking = null;
  if (document.visibilityState === "hidden") {
    parking = setTimeout(park, PARK_AFTER_MS);
  } else if (parked) {
    startLive();
  } else {
    reopenRefused();
  }
}

document.addEventListener("visibilitychange", onVisibility);
window.addEventListener("online", reopenRefused);
