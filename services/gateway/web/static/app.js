// Entry point: the shell (bell, sign-out) and the page module named by <body data-page>.

import { PAGE_USER_CHANGED, api, post } from "./api.js";
import { startBell } from "./bell.js";
import { h } from "./dom.js";
import { AUTH_EXPIRED } from "./events.js";
import { signedOutHere, startLive, stopLive } from "./live.js";

const DEFAULT_UNREAD_POLL_MS = 60000;

function meta(name) {
  return document.querySelector(`meta[name="${name}"]`)?.content ?? "";
}

export function unreadPollMs() {
  const value = Number.parseInt(meta("ops-unread-poll-ms"), 10);
  return Number.isFinite(value) && value > 0 ? value : DEFAULT_UNREAD_POLL_MS;
}

function startShell() {
  startLive();
  const bell = document.getElementById("bell");
  if (bell) startBell(bell, unreadPollMs());

  let signingOut = false;
  document.getElementById("sign-out")?.addEventListener("click", async () => {
    signingOut = true;
    stopLive(); // this tab is leaving: the sign-out is for the other tabs to hear
    try {
      await post("/auth/logout");
      signedOutHere();
    } finally {
      window.location.assign("/");
    }
  });

  // Not for the tab that signs out: a poll of its answered 401 once the session had ended,
  // after the logout's answer, and sent it to "your session expired" (a CI run saw it).
  // A page holding text typed and not sent stays, and says what to do: leaving would lose
  // it. Asked again at each refusal: once nothing is left to lose, the tab goes.
  let leaving = false;
  window.addEventListener(AUTH_EXPIRED, () => {
    if (signingOut || leaving) return;
    if (unsentText()) {
      showNotice(SESSION_ENDED);
      return;
    }
    leaving = true;
    window.location.assign(`/?${new URLSearchParams({ expired: "1", next: here() })}`);
  });
  // Signed in anew, but as someone else (another tab's sign-in): the gateway refused a
  // request of this page's, and will refuse each one. The page stays, typed text and all,
  // and says so; only a reload shows the user the browser is now signed in as.
  window.addEventListener(PAGE_USER_CHANGED, () => {
    if (signingOut || leaving) return;
    showNotice(ANOTHER_USER);
  });
  // Back from signing in again in another tab (the cookie is the browser's, not the tab's):
  // the notice goes, and the event stream its session's end closed opens again. Signed in
  // as another user, the request is refused (409) and the notice says so instead.
  const recheck = async () => {
    if (document.visibilityState !== "visible" || !sessionNotice?.isConnected) return;
    try {
      await api("/api/notifications/unread-count");
    } catch {
      return; // still signed out (that 401 showed the notice again), another user, or unreachable
    }
    sessionNotice.remove();
    reveal();
    startLive();
  };
  document.addEventListener("visibilitychange", recheck);
  window.addEventListener("focus", recheck);
}

// The page the tab is on, where signing in again leads back to.
function here() {
  return window.location.pathname + window.location.search + window.location.hash;
}

// Whether a form of the page holds text that was typed and not sent (a field that differs
// from what it started with).
const TYPED = new Set(["text", "search", "email", "url", "tel"]);
function unsentText() {
  return [...document.querySelectorAll("main form")].some((form) =>
    [...form.elements].some(
      (control) =>
        (control instanceof HTMLTextAreaElement || (control instanceof HTMLInputElement && TYPED.has(control.type))) &&
        control.value !== control.defaultValue,
    ),
  );
}

// A tab kept for its typed text, or left open when the browser signed in as someone else,
// showed the signed-out user's jobs, results and notifications to whoever sits at the
// browser now (a shared computer). Everything but the notice and the page's forms (typed
// text, or empty: an add form shows nothing of the user's) is concealed, the bell's count and
// the name in the header too; a sign-in anew as the same user shows it again (a class, not
// `hidden`: the pages keep their own `hidden`).
const CONCEALED = "concealed";
function conceal(notice) {
  const main = document.getElementById("main");
  if (!main) return;
  const kept = new Set([notice, ...main.querySelectorAll("form")]);
  const onPath = new Set();
  for (const element of kept) {
    for (let at = element; at && at !== main; at = at.parentElement) onPath.add(at);
  }
  const walk = (parent) => {
    for (const child of parent.children) {
      if (kept.has(child)) continue;
      if (onPath.has(child)) walk(child);
      else child.classList.add(CONCEALED);
    }
  };
  walk(main);
  for (const shown of document.querySelectorAll("#bell, .app-header .user")) shown.classList.add(CONCEALED);
}

function reveal() {
  for (const concealed of document.querySelectorAll(`.${CONCEALED}`)) concealed.classList.remove(CONCEALED);
}

// The session ended (it expired, or another tab signed out) while text was being typed: the
// text stays, and the notice says how to send it (a sign-in in another tab sets the
// browser's cookie, which this tab's next request carries). Signed in again as another user,
// nothing can be sent from this page (the gateway refuses it): the notice says to keep the
// text and reload.
const SESSION_ENDED = "session-ended";
const ANOTHER_USER = "another-user";
let sessionNotice = null;
function showNotice(kind) {
  if (sessionNotice?.isConnected && sessionNotice.dataset.kind === kind) return;
  const notice = kind === ANOTHER_USER ? anotherUserNotice() : sessionEndedNotice();
  notice.dataset.kind = kind;
  // A new alert rather than new text in the old one: it is announced again.
  if (sessionNotice?.isConnected) sessionNotice.replaceWith(notice);
  else (document.getElementById("main") ?? document.body).prepend(notice);
  sessionNotice = notice;
  conceal(notice);
}

function sessionEndedNotice() {
  const signIn = h("a", { href: `/?${new URLSearchParams({ next: here() })}`, target: "_blank", rel: "noopener" }, "Sign in again in a new tab");
  return h(
    "div",
    { class: "banner session-ended", role: "alert" },
    h(
      "p",
      {},
      "Your session ended, so nothing on this page can be saved right now. What you typed is still here. ",
      signIn,
      ", then come back to this tab and submit it again — or copy your text first.",
    ),
  );
}

function anotherUserNotice() {
  const reload = h("button", { type: "button", class: "button", onclick: () => window.location.reload() }, "Reload");
  return h(
    "div",
    { class: "banner session-ended", role: "alert" },
    h("p", {}, "This browser is now signed in as another user. Nothing on this page is sent. Copy what you typed, then reload the page."),
    reload,
  );
}

// Pollers stop on pagehide; a page restored from the back/forward cache starts afresh.
window.addEventListener("pageshow", (event) => {
  if (event.persisted) window.location.reload();
});

if (meta("ops-signed-in") === "true") startShell();

// A page whose module did not load (a dropped connection, a deploy under way) would
// otherwise stay empty: the user is told, and offered the reload that fetches it again.
function showPageFailed(main) {
  const reload = h("button", { type: "button", class: "button", onclick: () => window.location.reload() }, "Reload");
  main.prepend(h("div", { class: "form-error", role: "alert" }, h("p", {}, "This page could not load."), reload));
}

const page = document.body.dataset.page;
if (page && /^[a-z0-9-]+$/.test(page)) {
  const main = document.getElementById("main");
  import(`./pages/${page}.js`)
    .then((module) => module.mount(main))
    .catch((error) => {
      console.error(`page ${page} failed to start`, error);
      showPageFailed(main);
    });
}
