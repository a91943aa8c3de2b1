// Which model produced a result, said plainly. The development model (the
// built-in heuristic `opsctl up` runs) is named as what it is: keyword
// arithmetic on the texts, not an AI assessment.

import { h } from "./dom.js";
import { formatNumber } from "./format.js";

export const DEVELOPMENT_MODEL = "dev-heuristic";

export const HEURISTIC_NOTE =
  "This result comes from the built-in development heuristic, which compares keywords; it is not an AI assessment.";

export function isDevelopmentModel(provenance) {
  return Boolean(provenance && (provenance.development === true || provenance.model === DEVELOPMENT_MODEL));
}

export function modelSentence(provenance) {
  if (!provenance?.model) return "The model that produced this result is not recorded.";
  if (isDevelopmentModel(provenance)) return `Produced by ${provenance.model}, the built-in development heuristic.`;
  const route = provenance.route === "external" ? "an external model" : "a local model";
  return `Produced by ${provenance.model}, ${route}.`;
}

// The label under a result: the model, and for the development model what it is.
export function modelLabel(provenance) {
  const development = isDevelopmentModel(provenance);
  return h(
    "div",
    { class: `model-label${development ? " model-label--heuristic" : ""}` },
    h("p", { class: "model-label__name" }, modelSentence(provenance)),
    development ? h("p", { class: "model-label__note" }, HEURISTIC_NOTE) : null,
  );
}

// What an operation's attempts used, in one line: "412 tokens · 3.1 s" (tokens as the
// model server counted them, and the model's own time). Empty when no attempt reported
// any. Which model answered is the result's to say (SPEC §5: never the operation's).
export function usageLine(operation) {
  const usage = operation?.usage;
  if (!usage) return "";
  const tokens = usage.prompt_tokens + usage.completion_tokens;
  const seconds = Math.round(usage.model_seconds * 10) / 10;
  return `${formatNumber(tokens)} tokens · ${formatNumber(seconds)} s`;
}
