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
  const response = await send(path, { ...options, signal: bounded(path, options.signal) });
  return response.status === 204 ? null : bodyOf(response);
}

// A request sent and never answered (a mobile connection gone dead without a word) held the
// page's "Loading…" or a busy button until TCP gave up, minutes later. Past this long, with
// no answer (its body included), it reads as the server not reached: about as long as a user
// waits before deciding the page is stuck. One bound for all; no setting.
const REQUEST_TIMEOUT_MS = 20000;
// A long-poll (`…:wait?timeout=…`, follow.js) waits for the server's answer by design, longer
// than the bound; the event stream is an EventSource (live.js), never sent through here.
const LONG_POLL = /:wait(?:\?|$)/;

// The caller's signal, bounded: its own abort still reads as an abort (an AbortError); the
// bound's is a TimeoutError, which `send` and `bodyOf` read as the server not reached.
function bounded(path, signal) {
  if (LONG_POLL.test(path)) return signal;
  const bound = AbortSignal.timeout(REQUEST_TIMEOUT_MS);
  return signal ? AbortSignal.any([signal, bound]) : bound;
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
  const response = await send(path, { signal: bounded(path, signal), headers });
  if (response.status === 304 && known) return known;
  return { etag: response.headers.get("ETag"), body: await bodyOf(response) };
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
