// The caller's AI settings: the plan (read-only here), "Use AI analyses" and the
// privacy choice. A Free user sees why analyses are off and the command an operator
// runs to grant Pro (`opsctl users set-plan`), and cannot switch analyses on; if the
// API refuses a change, its reason is shown and the control goes back. Switching
// analyses on or off, and the privacy choice, are confirmed first and said afterwards
// (each applies to analyses started from then on). A Pro user also sees
// today's use of their daily token budget: what ended analyses spent and, apart, what
// running ones hold reserved; read again whenever an analysis starts or ends.

import { api, put } from "./api.js";
import { confirmDialog } from "./dialog.js";
import { h, replaceChildren } from "./dom.js";
import { BUDGET_CHANGED } from "./events.js";
import { field } from "./fields.js";
import { formatNumber } from "./format.js";

function currentUser() {
  return document.querySelector(".app-header .user")?.textContent.trim() || "USER_ID";
}

export function grantProCommand(user = currentUser()) {
  return `opsctl users set-plan ${user} pro`;
}

function freePlanNotice() {
  return h(
    "div",
    { class: "plan-notice", id: "plan-notice" },
    h("p", {}, "Your plan is Free, so AI analyses are off: they need the Pro plan."),
    h("p", {}, "An operator grants Pro by running this command on the server:"),
    h("pre", { class: "command" }, h("code", {}, grantProCommand())),
    h("p", { class: "hint" }, "Once your plan is Pro, you can switch on “Use AI analyses” here."),
  );
}

// A reservation is not spent: it is settled to what the model counted when its analysis ends.
export function budgetLine({ spent, reserved, limit, renews_at: renewsAt }) {
  const use =
    reserved > 0
      ? `${formatNumber(spent)} used and ${formatNumber(reserved)} reserved of ${formatNumber(limit)} tokens today`
      : `${formatNumber(spent)} of ${formatNumber(limit)} tokens used today`;
  return `${use}; the budget renews at ${renewal(renewsAt)}.`;
}

// The renewal in the reader's own time, with UTC's beside it: a reader in Tokyo was told
// "00:00 UTC" and left to work out that it meant 09:00 there.
function renewal(renewsAt) {
  const at = new Date(renewsAt ?? "");
  if (Number.isNaN(at.getTime()) || at.getTimezoneOffset() === 0) return "00:00 UTC";
  const local = at.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", hourCycle: "h23" });
  return `${local} your time (00:00 UTC)`;
}

// A spent budget's 429 says "it renews at 00:00 UTC" (the server knows no reader's zone):
// told again in the reader's own time. Its Retry-After is the seconds to that renewal, a
// UTC midnight, so the nearest whole hour of now + Retry-After is the renewal itself.
export function refusalInReadersTime(message, retryAfter) {
  const seconds = Number(retryAfter);
  if (!Number.isFinite(seconds) || seconds <= 0 || !message.includes("00:00 UTC")) return message;
  const HOUR_MS = 3600000;
  const renewsAt = Math.round((Date.now() + seconds * 1000) / HOUR_MS) * HOUR_MS;
  return message.replace("00:00 UTC", renewal(new Date(renewsAt).toISOString()));
}

// Past the renewal a moment, for a page clock a little behind the server's.
const RENEWAL_SLACK_MS = 5000;
// A read that failed (the renewal's, or a start's or an end's) is tried again this much later.
const BUDGET_RETRY_MS = 60000;

// The budget line follows the analyses that move it; a failed read keeps the last figures.
// It is read again as the budget renews (`renews_at`, 00:00 UTC): a tab kept open overnight
// said yesterday's "2,900 of 3,000 tokens used today" until an analysis started or ended.
function followBudget(line, first) {
  let nextRead = null;
  const renewsAt = (known) => {
    clearTimeout(nextRead);
    const due = Date.parse(known?.renews_at ?? "");
    if (Number.isFinite(due)) nextRead = setTimeout(read, Math.max(0, due - Date.now()) + RENEWAL_SLACK_MS);
  };
  async function read() {
    try {
      const { budget: now } = await api("/api/settings/ai");
      if (now) line.textContent = budgetLine(now);
      renewsAt(now);
    } catch {
      clearTimeout(nextRead);
      nextRead = setTimeout(read, BUDGET_RETRY_MS);
    }
  }
  window.addEventListener(BUDGET_CHANGED, read);
  renewsAt(first);
}

const TURN_ON = {
  title: "Switch AI analyses on?",
  message: "Strategy snapshots and CV reviews can then run on your job postings and CVs, with the model your privacy choice allows.",
  confirmLabel: "Switch on",
  cancelLabel: "Keep them off",
  danger: false,
};
const TURN_OFF = {
  title: "Switch AI analyses off?",
  message: "New analyses will not start until you switch them on again.",
  confirmLabel: "Switch off",
  cancelLabel: "Keep them on",
};

// Each operation keeps the privacy choice it started with: a change is for the next ones.
const PRIVACY = {
  external_allowed: {
    question: {
      title: "Allow an external model?",
      message: "New analyses may then send your job and CV text to an external model, where this server has one for them. Analyses already started keep the choice they started with.",
      confirmLabel: "Allow external",
      cancelLabel: "Keep local only",
      danger: false,
    },
    saved: "Privacy saved: new analyses may use an external model.",
  },
  local_only: {
    question: {
      title: "Use the local model only?",
      message: "New analyses then run on this server's own model only: your text goes to no external model. Analyses already started keep the choice they started with.",
      confirmLabel: "Local only",
      cancelLabel: "Keep external allowed",
      danger: false,
    },
    saved: "Privacy saved: new analyses use the local model only.",
  },
};

function privacySelect(settings) {
  return h(
    "select",
    { id: "ai-privacy" },
    h("option", { value: "local_only", selected: settings.privacy === "local_only" }, "Local model only"),
    h("option", { value: "external_allowed", selected: settings.privacy === "external_allowed" }, "External model allowed"),
  );
}

// Answers the settings as read (the page tells a Free plan on each card), or null.
export async function mountAiSettings(slot) {
  const error = h("p", { class: "form-error", role: "alert", hidden: true });
  let settings;
  try {
    settings = await api("/api/settings/ai");
  } catch (failure) {
    replaceChildren(slot, h("p", { class: "form-error", role: "alert" }, `The AI settings could not be loaded. ${failure.message}`));
    return null;
  }
  const pro = settings.plan === "pro";
  const enabled = h("input", {
    type: "checkbox",
    checked: settings.ai_enabled,
    disabled: !pro && !settings.ai_enabled,
    "aria-describedby": pro ? null : "plan-notice",
  });

  const done = h("p", { class: "status", role: "status" }); // what a change did, below both controls

  // `undo` puts the control back when the API refuses the change; answers whether it was saved.
  async function save(change, undo) {
    try {
      settings = await put("/api/settings/ai", { json: change });
      error.hidden = true;
      return true;
    } catch (failure) {
      undo();
      error.textContent = `The setting was not changed. ${failure.message}`;
      error.hidden = false;
      return false;
    }
  }

  enabled.addEventListener("change", async () => {
    const on = enabled.checked;
    done.textContent = "";
    const confirmed = await confirmDialog(on ? TURN_ON : TURN_OFF);
    if (!confirmed) {
      enabled.checked = settings.ai_enabled;
      return;
    }
    if (await save({ ai_enabled: on }, () => (enabled.checked = settings.ai_enabled))) {
      done.textContent = on ? "AI analyses are on: start one on a job posting or a CV." : "AI analyses are off: new ones do not start until you switch them on again.";
    }
  });
  const privacy = privacySelect(settings);
  privacy.addEventListener("change", async () => {
    const choice = PRIVACY[privacy.value];
    done.textContent = "";
    if (!choice || !(await confirmDialog(choice.question))) {
      privacy.value = settings.privacy;
      return;
    }
    if (await save({ privacy: privacy.value }, () => (privacy.value = settings.privacy))) done.textContent = choice.saved;
  });
  const budget = pro && settings.budget ? h("p", { class: "hint", id: "ai-budget" }, budgetLine(settings.budget)) : null;
  if (budget) followBudget(budget, settings.budget);
  replaceChildren(
    slot,
    h("p", { class: "hint" }, pro ? "Plan: Pro." : "Plan: Free (AI analyses need Pro)."),
    budget,
    pro ? null : freePlanNotice(),
    h("label", { class: "check" }, enabled, " Use AI analyses"),
    field("Privacy", privacy, "External models see your text only when you allow it."),
    done,
    error,
  );
  return settings;
}
