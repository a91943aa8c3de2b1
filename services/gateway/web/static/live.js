// One event stream per browser (GET /api/events), shared by its tabs: the caller's operation
// changes, with the answer a running analysis has written so far, and the unread count. Each is
// re-dispatched on `window` (LIVE_OPERATION, LIVE_UNREAD) for the parts of the page that show
// them. The browser reconnects by itself and sends the last event id, so nothing is missed
// across a drop. While no stream is open for the tab (refused, dropped, none to share, or no
// EventSource), `liveOpen()` is false and the pages poll as they always did: nothing is said
// about it. A stream whose sign-in ended (logout in any tab, a revocation, expiry) says so last
// (`signed_out`): the tab reacts as to a 401 (app.js).
//
// A browser keeps six connections per server over HTTP/1.1 (what `opsctl up` serves), and each
// open stream holds one: with a stream per tab, five windows of the product side by side left a
// sixth unable even to load its page (and the gateway holds a user to 16 streams and waits). So
// one tab holds the stream for every tab of the browser's origin rendered for the same user: the
// leader, which holds the Web Lock named for that user while it leads, and passes on what its
// stream tells over the BroadcastChannel of the same name. The others (followers) open none and
// act on what is passed on as on their own stream's; the tabs of another user (the browser since
// signed in as someone else) never lead for these nor hear them. The leader says who may trust
// what: `opened` and `closed` as its stream opens and drops, and whether it is open (`state`) to
// a tab that says `hello` as it begins to listen; with no leader, no one answers, and the tab
// that asked takes the lock and opens its own. A follower's `liveOpen()` is its leader's word.
// Without Web Locks (a page that is no secure context, plain HTTP to another host than this
// one, has none) or BroadcastChannel, each tab holds its own stream, as it did before.
//
// Only a shown tab leads for long. A tab hidden (another tab of the window chosen, the window
// minimised) for PARK_AFTER_MS parks: it closes its stream and lets the lock go, or stops
// waiting for it, and stops listening but for a sign-out; one opened in the background neither
// leads nor listens to more.
// Shown again, it joins anew, and what it shows is read again (its pollers run at once, and a
// `reopened` asks the pages to look again: on /jobs a read of every card). A glance at another
// tab and back within PARK_AFTER_MS keeps the stream (a follower keeps listening), and reads
// nothing again. When the leader closes, parks or leaves, a shown tab waiting for the lock takes
// it and opens its own stream, whose `opened` is `reopened` to the followers: what changed
// between the two may not have reached them.
export const PARK_AFTER_MS = 20000;

import { pageUser } from "./api.js";
import { AUTH_EXPIRED } from "./events.js";

export const LIVE_OPERATION = "live:operation";
export const LIVE_UNREAD = "live:unread";
export const LIVE_OPENED = "live:opened";

const SHARED = typeof BroadcastChannel === "function" && typeof navigator.locks?.request === "function";
const PASSED_ON = { operation: LIVE_OPERATION, unread: LIVE_UNREAD };

let source = null; // this tab's own stream, as the leader (or, without sharing, as any tab)
let opens = 0; // streams this tab heard open: its own, or its leader's
let starts = 0;
// The browser reopens a stream that dropped, but closes one the gateway refused (an HTTP
// error: a proxy's 502 on a bad connection, a 503 while a service is down) for good, and
// the tabs would poll until reloaded. A refused stream is opened again when a tab is shown
// again or the browser is back online: the moments a bad spell has likely passed.
let refused = false;
// Started, and neither stopped (the tab signs out or leaves) nor told its sign-in ended.
let wanted = false;
// Closed (or never opened) because the tab is hidden: it joins again when shown.
let parked = false;
let parking = null; // the timer that parks a hidden tab
// Heard nothing for a while (parked, signed out): the next stream it hears open is `reopened`.
let missed = false;
let leading = !SHARED; // without sharing, each tab is its own leader
let release = null; // lets the lock go, while leading
let asking = null; // withdraws the wait for the lock
let channel = null;
let leaderOpen = false; // a follower's: its leader says its stream is open

export function liveOpen() {
  if (!leading) return leaderOpen;
  return source !== null && source.readyState === EventSource.OPEN;
}

function announce(name, detail) {
  window.dispatchEvent(new CustomEvent(name, { detail }));
}

function tell(message) {
  channel?.postMessage(message);
}

// The page user names the lock and the channel: a stream refused for another user (409
// `page_user_changed`) leads none of this user's tabs, and no tab hears another user's changes.
function sharedName() {
  return `ops-live:${pageUser()}`;
}

// The user the page is for, as every request of the page says it (api.js): an EventSource
// sends no header of its choosing, so it goes in the query. A stream the gateway refuses for
// another user (409 `page_user_changed`) is closed by the browser for good; a later start
// opens a new one.
function eventsUrl() {
  const user = pageUser();
  return user ? `/api/events?${new URLSearchParams({ page_user: user })}` : "/api/events";
}

function passOn(kind, event) {
  let detail;
  try {
    detail = JSON.parse(event.data);
  } catch {
    return;
  }
  announce(PASSED_ON[kind], detail);
  tell({ kind, detail });
}

function openStream() {
  if (source !== null && source.readyState !== EventSource.CLOSED) return;
  refused = false;
  starts += 1;
  const opened = new EventSource(eventsUrl());
  source = opened;
  opened.addEventListener("error", () => {
    if (opened.readyState === EventSource.CLOSED) refused = true; // not by close(): no error then
    tell({ kind: "closed" });
  });
  // `reopened`: open again after a drop, when what it told meanwhile may not all have
  // reached the page (a read it asked for failed while the gateway was away); or a stream
  // started again (after a refusal, a sign-in anew, another leader's), which tells only what
  // changes from now.
  opened.addEventListener("open", () => {
    const reopened = missed || opens > 0 || starts > 1;
    opens += 1;
    missed = false;
    announce(LIVE_OPENED, { reopened });
    tell({ kind: "opened", reopened });
  });
  opened.addEventListener("operation", (event) => passOn("operation", event));
  opened.addEventListener("unread", (event) => passOn("unread", event));
  opened.addEventListener("signed_out", () => {
    tell({ kind: "signed_out" });
    signedOut();
  });
}

function closeStream() {
  if (source === null) return;
  source.close();
  source = null;
  tell({ kind: "closed" });
}

// Closed for good, not stopped: a tab that kept its typed text (app.js) starts again once the
// user has signed in anew.
function signedOut() {
  wanted = false;
  missed = true;
  resign();
  announce(AUTH_EXPIRED);
}

// No longer leads (its stream closed, the lock let go) nor waits to.
function resign() {
  asking?.abort();
  asking = null;
  closeStream();
  leaderOpen = false;
  if (SHARED && leading) {
    leading = false;
    release();
    release = null;
  }
}

// Waits for the lock; once it has it, leads until `resign`. A tab that stopped wanting it
// meanwhile lets it go at once, to the next one waiting.
function compete() {
  if (leading || asking !== null) return;
  const asked = new AbortController();
  asking = asked;
  navigator.locks
    .request(sharedName(), { signal: asked.signal }, () => {
      const current = asking === asked;
      if (current) asking = null;
      if (!current || !wanted || parked) return undefined;
      return new Promise((resolve) => {
        release = resolve;
        lead();
      });
    })
    .catch(() => {}); // withdrawn before it was granted
}

function lead() {
  leading = true;
  leaderOpen = false;
  // A leader that went without a word (its tab crashed) left its followers trusting its stream.
  tell({ kind: "closed" });
  openStream();
}

// What another tab of the user said. A parked tab hears only a sign-out: shown again, it
// showed the signed-out user's page to whoever sits at the browser now until its first
// request was refused.
function heard({ data }) {
  if (!wanted) return;
  if (data?.kind === "signed_out") {
    signedOut();
    return;
  }
  if (parked) return; // not listening: it reads again when it listens again
  if (leading) {
    if (data?.kind === "hello") {
      reopenRefused();
      tell({ kind: "state", open: liveOpen() });
    }
  } else if (data?.kind === "opened") {
    const reopened = data.reopened || missed || opens > 0;
    opens += 1;
    missed = false;
    leaderOpen = true;
    announce(LIVE_OPENED, { reopened });
  } else if (data?.kind === "state" && data.open) {
    if (leaderOpen) return;
    leaderOpen = true;
    opens += 1; // not its first: a stream that opens later is `reopened` here
    if (missed) {
      missed = false;
      announce(LIVE_OPENED, { reopened: true });
    }
  } else if (data?.kind === "state" || data?.kind === "closed") {
    leaderOpen = false;
  } else if (Object.hasOwn(PASSED_ON, data?.kind ?? "")) {
    announce(PASSED_ON[data.kind], data.detail);
  }
}

// Leads or follows: a shown tab that wants a stream.
function join() {
  if (!SHARED) {
    openStream();
    return;
  }
  listen();
  if (leading) {
    openStream();
    return;
  }
  compete();
  tell({ kind: "hello" });
}

function listen() {
  if (!SHARED || channel !== null) return;
  channel = new BroadcastChannel(sharedName());
  channel.addEventListener("message", heard);
}

export function startLive() {
  if (typeof EventSource !== "function") return;
  wanted = true;
  listen();
  // Pollers stop on pagehide; so does the stream, and the lock goes (a restored page reloads,
  // app.js).
  window.addEventListener("pagehide", leave, { once: true });
  if (document.visibilityState === "hidden") {
    parked = true;
    resign();
    return;
  }
  parked = false;
  join();
}

// The tab is signing out: showing it again opens nothing. As leader it keeps the lock until it
// leaves: a tab taking over now would open a stream only for the sign-out to end it.
export function stopLive() {
  wanted = false;
  parked = false;
  asking?.abort();
  asking = null;
  closeStream();
}

// This tab signed the browser out (app.js). The other tabs are told at once: the stream they
// share may have been this tab's, closed as it began signing out, and one opened by another
// tab after the sign-out would be refused without a word.
export function signedOutHere() {
  tell({ kind: "signed_out" });
}

function leave() {
  wanted = false;
  parked = false;
  resign();
  channel?.close();
  channel = null;
}

function reopenRefused() {
  if (leading && wanted && refused && source?.readyState === EventSource.CLOSED) openStream();
}

function park() {
  parking = null;
  if (document.visibilityState !== "hidden" || !wanted || parked) return;
  parked = true;
  missed = true;
  resign();
}

function onVisibility() {
  clearTimeout(parking);
  parking = null;
  if (document.visibilityState === "hidden") {
    parking = setTimeout(park, PARK_AFTER_MS);
  } else if (parked) {
    parked = false;
    if (wanted) join();
  } else {
    wakeLeader();
  }
}

// A moment a refused stream may open again: the leader tries at once, a follower asks its
// leader to (and whether its stream is open).
function wakeLeader() {
  if (!wanted || document.visibilityState !== "visible") return;
  if (leading) reopenRefused();
  else tell({ kind: "hello" });
}

document.addEventListener("visibilitychange", onVisibility);
window.addEventListener("online", wakeLeader);
