// The result of an AI analysis (strategy snapshot or CV review), and its progress.

import { h, replaceChildren } from "./dom.js";
import { TERMINAL_STATES, formatTime, stateLabel } from "./format.js";

const SECTIONS = {
  "strategy.snapshot": {
    score: ["fit_score", "Fit"],
    lists: [
      ["strengths", "Strengths"],
      ["gaps", "Gaps"],
      ["next_steps", "Next steps"],
    ],
  },
  "cv.review": {
    score: ["overall_score", "Overall"],
    lists: [
      ["strengths", "Strengths"],
      ["improvements", "Improvements"],
      ["keywords_missing", "Missing keywords"],
    ],
  },
};

function resultView(taskType, snapshot) {
  const layout = SECTIONS[taskType];
  const result = snapshot.result;
  const [scoreField, scoreLabel] = layout.score;
  return h(
    "div",
    { class: "analysis__result" },
    h(
      "p",
      { class: "analysis__score" },
      h("strong", {}, `${scoreLabel}: ${result[scoreField]}`),
      h("span", { class: "hint" }, ` / 100 · updated ${formatTime(snapshot.updated_at)}`),
    ),
    h("p", {}, result.summary),
    layout.lists
      .filter(([field]) => (result[field] ?? []).length > 0)
      .map(([field, label]) =>
        h("div", { class: "analysis__list" }, h("h4", {}, label), h("ul", {}, result[field].map((item) => h("li", {}, item)))),
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

// Re-render `slot` from a GET …/strategy-snapshot (or …/cv-review) answer.
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
