// Calls to the gateway's JSON API; errors arrive as RFC 9457 problem details, and
// their text reaches people as a full sentence.

import { AUTH_EXPIRED } from "./events.js";
import { sentence } from "./format.js";

export class ApiError extends Error {
  constructor(status, problem) {
    super(sentence(problem.detail || problem.title || `The server answered HTTP ${status}`));
    this.status = status;
    this.code = problem.code || "error";
    this.field = problem.field ?? null; // the request's field it is about, when it is one
    this.retryAfter = problem.retryAfter ?? null;
    this.operationId = problem.operation_id ?? null; // the analysis a 409 analysis_active names
  }
}

async function problemOf(response) {
  try {
    const body = await response.json();
    return typeof body === "object" && body !== null ? body : {};
  } catch {
    return {};
  }
}

// The session cookie is the browser's, not the tab's: another tab may have signed it in as
// someone else since this page was rendered. Each request says whom the page is for, and the
// gateway refuses it (409 `page_user_changed`) when the cookie signs in another user.
export const PAGE_USER_CHANGED = "auth:page-user-changed";
export const PAGE_USER_HEADER = "X-Ops-Page-User";

export function pageUser() {
  return document.querySelector('meta[name="ops-user"]')?.content ?? "";
}

export async function api(path, options = {}) {
  return withinDeadline(path, options.signal, async (signal) => {
    const response = await send(path, { ...options, signal });
    return response.status === 204 ? null : await bodyOf(response);
  });
}

// A request sent and never answered (a mobile connection gone dead without a word) held the
// page's "Loading…" or a busy button until TCP gave up, minutes later. Past this long, with
// no answer (its body included), it reads as the server not reached: about as long as a user
// waits before deciding the page is stuck. One bound for all; no setting.
const REQUEST_TIMEOUT_MS = 20000;
// A long-poll (`…:wait?timeout=…`, follow.js) waits for the server's answer by design, longer
// than the bound; the event stream is an EventSource (live.js), never sent through here.
const LONG_POLL = /:wait(?:\?|$)/;

// Requests under way, each with the looks it has been under way at and how it gives up. One
// timer looks at them all every quarter of the bound, and a request gives up at its fourth
// look (15 to 20 s after it was sent). Looks counted, not a deadline per request: a clock
// that jumps ahead (a test's page.clock.pause_at) runs a due timer once, so it does not give
// up on all the page had sent; and one timer, not one per request (nor AbortSignal.timeout,
// one more timer each), leaves the page's timers much as they were.
const LOOKS = 4;
const underway = new Set();
let watchdog = null;

function lookAtUnderway() {
  watchdog = null;
  for (const request of underway) {
    request.looks += 1;
    if (request.looks >= LOOKS) {
      underway.delete(request);
      request.giveUp();
    }
  }
  if (underway.size > 0) watchdog = setTimeout(lookAtUnderway, REQUEST_TIMEOUT_MS / LOOKS);
}

// `request(signal)` within the bound, through an AbortController of its own. The caller's own
// abort still reads as its abort; the bound's reads as the server not reached.
async function withinDeadline(path, signal, request) {
  if (LONG_POLL.test(path)) return request(signal);
  const bound = new AbortController();
  const forward = () => bound.abort(signal.reason);
  if (signal?.aborted) forward();
  else signal?.addEventListener("abort", forward, { once: true });
  let timedOut = false;
  const mine = {
    looks: 0,
    giveUp() {
      timedOut = true;
      bound.abort();
    },
  };
  underway.add(mine);
  watchdog ??= setTimeout(lookAtUnderway, REQUEST_TIMEOUT_MS / LOOKS);
  try {
    return await request(bound.signal);
  } catch (error) {
    if (timedOut && !signal?.aborted) throw unreachable();
    throw error;
  } finally {
    underway.delete(mine);
    signal?.removeEventListener("abort", forward);
  }
}

function unreachable() {
  return new ApiError(0, { code: "network_error", detail: "The server could not be reached." });
}

// A success's JSON body. What answered may not be the gateway (a captive portal's or a
// proxy's page on a bad connection), or the connection may drop while the body comes:
// either is the server not reached, never a parser's message ("Unexpected token '<'").
async function bodyOf(response) {
  try {
    return await response.json();
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw unreachable();
  }
}

// A GET of what the page read before: `known` is that earlier answer ({etag, body}, as this
// answers), and the server answers 304 without a body when it has not changed since; the
// answer is then `known` itself. Answers {etag, body}.
export async function revalidate(path, known = null, { signal } = {}) {
  const headers = known?.etag ? { "If-None-Match": known.etag } : {};
  return withinDeadline(path, signal, async (bounded) => {
    const response = await send(path, { signal: bounded, headers });
    if (response.status === 304 && known) return known;
    return { etag: response.headers.get("ETag"), body: await bodyOf(response) };
  });
}

// The response to a request, once it is a success: a 304 is one to a request that named
// what it has (If-None-Match; the page keeps it, never the browser's cache: the API's
// answers are no-store).
async function send(path, { method = "GET", signal, json, headers = {} } = {}) {
  let response;
  const request = {
    method,
    signal,
    credentials: "same-origin",
    headers: { Accept: "application/json", ...headers },
  };
  const user = pageUser();
  if (user) request.headers[PAGE_USER_HEADER] = user;
  if (json !== undefined) {
    request.body = JSON.stringify(json);
    request.headers["Content-Type"] = "application/json";
  }
  try {
    response = await fetch(path, request);
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw unreachable();
  }
  if (response.status === 401) {
    window.dispatchEvent(new CustomEvent(AUTH_EXPIRED));
  }
  const conditional = Object.keys(headers).some((name) => name.toLowerCase() === "if-none-match");
  if (!response.ok && !(response.status === 304 && conditional)) {
    const problem = await problemOf(response);
    problem.retryAfter = response.headers.get("Retry-After");
    if (response.status === 409 && problem.code === "page_user_changed") {
      window.dispatchEvent(new CustomEvent(PAGE_USER_CHANGED));
    }
    throw new ApiError(response.status, problem);
  }
  return response;
}

export function post(path, options = {}) {
  return api(path, { ...options, method: "POST" });
}

export function put(path, options = {}) {
  return api(path, { ...options, method: "PUT" });
}

export function del(path, options = {}) {
  return api(path, { ...options, method: "DELETE" });
}
