// Words and times for people.

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

export function stateLabel(operation) {
  if (operation.cancel_requested && !TERMINAL_STATES.has(operation.state)) return "Cancelling";
  return STATE_LABELS[operation.state] ?? operation.state;
}

const TASK_LABELS = {
  "strategy.snapshot": "Strategy snapshot",
  "cv.review": "CV review",
};

// Known tasks by name; others from their type ("report.build" -> "Report build").
export function taskLabel(taskType) {
  if (TASK_LABELS[taskType]) return TASK_LABELS[taskType];
  const words = taskType.replace(/[._-]+/g, " ").trim();
  return words.charAt(0).toUpperCase() + words.slice(1);
}

export function subjectLabel(subject) {
  if (!subject || (!subject.type && !subject.id)) return "";
  return `${subject.type || "subject"} ${subject.id}`.trim();
}

const timeFormat = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });

export function formatTime(iso) {
  return iso ? timeFormat.format(new Date(iso)) : "";
}
