// The sign-in page: turn a pasted token (from `opsctl token`) into the session cookie.

export function mount() {
  const params = new URLSearchParams(window.location.search);
  if (params.get("expired") === "1") {
    const notice = document.getElementById("signin-notice");
    notice.textContent = "Your session ended. Please sign in again.";
    notice.hidden = false;
  }

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
      window.location.assign("/operations");
      return;
    }
    error.textContent =
      response === null
        ? "The server could not be reached. Try again."
        : "That token is not valid or has expired. Create a new one with opsctl token.";
    error.hidden = false;
    form.elements.token.focus();
  });
}
