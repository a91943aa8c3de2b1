// The caller's AI settings: the plan (read-only here), "Use AI analyses" and the
// privacy choice. A Free user sees why analyses are off and the command an operator
// runs to grant Pro (`opsctl users set-plan`), and cannot switch analyses on; if the
// API refuses a change, its reason is shown and the control goes back.

import { api, put } from "./api.js";
import { h, replaceChildren } from "./dom.js";

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

function privacyField(settings, save) {
  const privacy = h(
    "select",
    { id: "ai-privacy" },
    h("option", { value: "local_only", selected: settings.privacy === "local_only" }, "Local model only"),
    h("option", { value: "external_allowed", selected: settings.privacy === "external_allowed" }, "External model allowed"),
  );
  privacy.addEventListener("change", () => save({ privacy: privacy.value }, () => (privacy.value = settings.privacy)));
  return h(
    "label",
    { class: "field" },
    h("span", { class: "field__label" }, "Privacy"),
    privacy,
    h("span", { class: "hint" }, "External models see your text only when you allow it."),
  );
}

export async function mountAiSettings(slot) {
  const error = h("p", { class: "form-error", role: "alert", hidden: true });
  let settings;
  try {
    settings = await api("/api/settings/ai");
  } catch (failure) {
    replaceChildren(slot, h("p", { class: "form-error", role: "alert" }, `The AI settings could not be loaded. ${failure.message}`));
    return;
  }
  const pro = settings.plan === "pro";
  const enabled = h("input", {
    type: "checkbox",
    checked: settings.ai_enabled,
    disabled: !pro && !settings.ai_enabled,
    "aria-describedby": pro ? null : "plan-notice",
  });

  // `undo` puts the control back when the API refuses the change.
  async function save(change, undo) {
    try {
      settings = await put("/api/settings/ai", { json: change });
      error.hidden = true;
    } catch (failure) {
      undo();
      error.textContent = `The setting was not changed. ${failure.message}`;
      error.hidden = false;
    }
  }

  enabled.addEventListener("change", () => save({ ai_enabled: enabled.checked }, () => (enabled.checked = settings.ai_enabled)));
  replaceChildren(
    slot,
    h("p", { class: "hint" }, pro ? "Plan: Pro." : "Plan: Free (AI analyses need Pro)."),
    pro ? null : freePlanNotice(),
    h("label", { class: "check" }, enabled, " Use AI analyses"),
    privacyField(settings, save),
    error,
  );
}
