// The sign-in page: turn a pasted token (from `opsctl token`) into the session cookie.
// Signed in, the browser goes back to the page whose session ended (`?next=/jobs`), else
// to /operations.

const AFTER_SIGN_IN = "/operations";

// A path of this site: "/" not followed by a slash or a backslash ("//host", and "/\host",
// which browsers read as it, lead to another site), and no backslash, white space or
// control character anywhere. The gateway's dev sign-in holds `next` to the same rule
// (devlogin.py).
const SITE_PATH = /^\/(?![/\\])[^\\\s\x00-\x1f\x7f]*$/;

// `next` when it is a path of this site, else /operations: an open redirect would hand a
// freshly signed-in user to any site. Asked of `next` and again of the path as the URL
// parser rewrites it: its dot segments go, and "/.//host" comes out as "//host".
export function returnPath(next) {
  if (typeof next !== "string" || !SITE_PATH.test(next)) return AFTER_SIGN_IN;
  const url = new URL(next, window.location.origin);
  const path = url.pathname + url.search + url.hash;
  if (url.origin !== window.location.origin || url.pathname === "/" || !SITE_PATH.test(path)) return AFTER_SIGN_IN;
  return path;
}

export function mount() {
  const params = new URLSearchParams(window.location.search);
  const next = returnPath(params.get("next"));
  if (params.get("expired") === "1") {
    const notice = document.getElementById("signin-notice");
    notice.textContent = next === AFTER_SIGN_IN ? "Your session ended. Please sign in again." : "Your session ended. Sign in again to go back to the page you were on.";
    notice.hidden = false;
  }

  // The development form posts as a form does: the gateway's redirect is told where.
  const dev = document.querySelector("form[action^='/auth/dev-login']");
  if (dev && next !== AFTER_SIGN_IN) dev.action = `/auth/dev-login?${new URLSearchParams({ next })}`;

  const form = document.getElementById("token-form");
  const error = document.getElementById("token-error");
  form?.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.hidden = true;
    const token = form.elements.token.value.trim();
    const response = await fetch("/auth/login", {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify({ token }),
    }).catch(() => null);
    if (response?.ok) {
      window.location.assign(next);
      return;
    }
    error.textContent =
      response === null
        ? "The server could not be reached. Try again."
        : "That token is not valid or has expired. Create a new one with opsctl token.";
    error.hidden = false;
    form.elements.token.focus();
  });

  // The buttons come disabled: the page's module loads after the page, and a form sent
  // before then would go as a plain GET, with the pasted token in the address bar (and
  // the server's log), or to the dev sign-in without `next`.
  for (const button of document.querySelectorAll("form button[type='submit'][disabled]")) button.disabled = false;
}
