// The result of an analysis (any registered task type), and its progress.

import { h, replaceChildren } from "./dom.js";
import { TERMINAL_STATES, formatTime, stateLabel } from "./format.js";
import { task } from "./tasks.js";

// The result, laid out by the task's answer schema: each integer is a score
// under its title, each string a paragraph, each non-empty array a titled list.
function resultView(taskType, snapshot) {
  const properties = task(taskType)?.answer?.properties ?? {};
  const result = snapshot.result;
  const fields = Object.entries(properties);
  const scores = fields.filter(([, schema]) => schema.type === "integer");
  const texts = fields.filter(([, schema]) => schema.type === "string");
  const lists = fields.filter(([name, schema]) => schema.type === "array" && (result[name] ?? []).length > 0);
  return h(
    "div",
    { class: "analysis__result" },
    scores.map(([name, schema]) =>
      h(
        "p",
        { class: "analysis__score" },
        h("strong", {}, `${schema.title ?? name}: ${result[name]}`),
        h("span", { class: "hint" }, ` / ${schema.maximum ?? 100} · updated ${formatTime(snapshot.updated_at)}`),
      ),
    ),
    texts.map(([name]) => h("p", {}, result[name])),
    lists.map(([name, schema]) =>
      h("div", { class: "analysis__list" }, h("h4", {}, schema.title ?? name), h("ul", {}, result[name].map((item) => h("li", {}, item)))),
    ),
  );
}

function statusView(operation) {
  if (!operation || operation.state === "succeeded") return null;
  const busy = !TERMINAL_STATES.has(operation.state);
  return h(
    "div",
    { class: "analysis__status", role: "status" },
    h("span", { class: `state state--${operation.state}` }, stateLabel(operation)),
    busy
      ? h("progress", { max: 100, value: operation.progress_percent, "aria-label": "Analysis progress" }, `${operation.progress_percent}%`)
      : null,
    h("a", { href: "/operations" }, "See it in your operations"),
  );
}

// Re-render `slot` from a GET of a task's resource (e.g. …/strategy-snapshot).
export function renderAnalysis(slot, taskType, answer) {
  replaceChildren(
    slot,
    statusView(answer.operation),
    answer.snapshot ? resultView(taskType, answer.snapshot) : null,
  );
}

export function isActive(answer) {
  return Boolean(answer.operation && !TERMINAL_STATES.has(answer.operation.state));
}
