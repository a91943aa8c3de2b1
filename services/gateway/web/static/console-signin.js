// The operator console's sign-in page: spend the one-time link from `opsctl console link`.
// The link's secret arrives in the fragment (#link=…), which no request carries: it is
// put in the form, then taken off the address bar, and sent only when the operator
// presses the button.

const form = document.getElementById("console-signin-form");
const field = document.getElementById("console-link");
const error = document.getElementById("console-signin-error");

// The button comes disabled, as on the owners' sign-in page: sent before this script
// ran, the form would go as a plain GET, the link's secret in the address bar.
form.querySelector('button[type="submit"]').disabled = false;

const fromFragment = new URLSearchParams(window.location.hash.slice(1)).get("link");
if (fromFragment) {
  field.value = fromFragment;
  history.replaceState(null, "", window.location.pathname);
  form.querySelector('button[type="submit"]').focus();
}

function explain(status, problem) {
  if (status === 0) return "The server could not be reached. Try again.";
  if (status === 401) return "This sign-in link is unknown, expired or already used. Make a new one with opsctl console link.";
  if (status === 429) return "Too many sign-in attempts. Wait a minute, then try again.";
  return problem?.detail || `The server answered HTTP ${status}.`;
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  error.hidden = true;
  const link = field.value.trim();
  let response = null;
  try {
    response = await fetch("/console/sign-in", {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify({ link }),
    });
  } catch {
    response = null;
  }
  if (response?.ok) {
    window.location.assign("/console");
    return;
  }
  const problem = response ? await response.json().catch(() => null) : null;
  error.textContent = explain(response?.status ?? 0, problem);
  error.hidden = false;
  field.focus();
});
