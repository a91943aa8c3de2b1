// Words and times for people.

import { task } from "./tasks.js";

const STATE_LABELS = {
  queued: "Queued",
  running: "Running",
  waiting_for_retry: "Waiting to retry",
  waiting_for_external_fallback: "Waiting for fallback",
  succeeded: "Succeeded",
  failed: "Failed",
  cancelled: "Cancelled",
};

export const TERMINAL_STATES = new Set(["succeeded", "failed", "cancelled"]);

// Work that moves soon (a worker takes it, reports progress, stops for a cancel):
// the pages poll faster while they show any.
export function isLive(operation) {
  if (!operation || TERMINAL_STATES.has(operation.state)) return false;
  return operation.state === "queued" || operation.state === "running" || operation.cancel_requested;
}

// Succeeded although its owner asked to cancel: the result was already published.
export function cancelCameTooLate(operation) {
  return Boolean(operation && operation.state === "succeeded" && operation.cancel_requested);
}

export function stateLabel(operation) {
  if (operation.cancel_requested && !TERMINAL_STATES.has(operation.state)) return "Cancelling";
  // Queued with progress: an attempt got this far and was handed back or failed (issue 38).
  if (operation.state === "queued" && operation.progress_percent > 0) return "Interrupted, will resume";
  return STATE_LABELS[operation.state] ?? operation.state;
}

// Registered tasks by their label; others from their type ("report.build" -> "Report build").
export function taskLabel(taskType) {
  const known = task(taskType);
  if (known) return known.label;
  const words = taskType.replace(/[._-]+/g, " ").trim();
  return words.charAt(0).toUpperCase() + words.slice(1);
}

// A subject by its name (e.g. "Platform engineer at Acme") when the page knows it,
// else by its reference ("job job-42").
export function subjectLabel(subject, name = null) {
  if (name) return name;
  if (!subject || (!subject.type && !subject.id)) return "";
  return `${subject.type || "subject"} ${subject.id}`.trim();
}

// A message as a full sentence: capitalised, ending in a full stop (or ? or !).
export function sentence(text) {
  const trimmed = String(text ?? "").trim();
  if (!trimmed) return "";
  const capital = trimmed.charAt(0).toUpperCase() + trimmed.slice(1);
  return /[.!?…]$/.test(capital) ? capital : `${capital}.`;
}

// The one number format of the UI, the server's sentences' too: "20,000".
const numberFormat = new Intl.NumberFormat("en-US");

export function formatNumber(value) {
  return numberFormat.format(value);
}

const timeFormat = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });

export function formatTime(iso) {
  return iso ? timeFormat.format(new Date(iso)) : "";
}
