// Entry point: the shell (bell, sign-out) and the page module named by <body data-page>.

import { post } from "./api.js";
import { startBell } from "./bell.js";
import { h } from "./dom.js";
import { AUTH_EXPIRED } from "./events.js";
import { startLive, stopLive } from "./live.js";

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
    stopLive(); // this tab is leaving: its stream's `signed_out` is for the other tabs
    try {
      await post("/auth/logout");
    } finally {
      window.location.assign("/");
    }
  });

  // Not for the tab that signs out: a poll of its answered 401 once the session had ended,
  // after the logout's answer, and sent it to "your session expired" (a CI run saw it).
  window.addEventListener(
    AUTH_EXPIRED,
    () => {
      if (!signingOut) window.location.assign("/?expired=1");
    },
    { once: true },
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
