// The task registry (durable_ops.model.tasks), as the gateway renders it into
// every page: labels, paths, subject kinds and answer schemas. Never a copy.

const element = document.getElementById("ops-tasks");
export const TASKS = element ? JSON.parse(element.textContent) : [];

const BY_NAME = new Map(TASKS.map((task) => [task.name, task]));

export function task(name) {
  return BY_NAME.get(name) ?? null;
}

// The task types that work on one subject kind ("job", "attachment").
export function tasksFor(subjectKind) {
  return TASKS.filter((entry) => entry.subject.name === subjectKind);
}

// The resource of one task type for one subject.
export function taskPath(entry, subjectId) {
  return entry.path.replace("{id}", encodeURIComponent(subjectId));
}
