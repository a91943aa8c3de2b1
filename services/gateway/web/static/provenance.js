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

// The provenance of a published result: the note's own, else that of the operation
// that published it (a newer operation for the same subject may not have finished).
export function provenanceOf(snapshot, operation) {
  if (snapshot?.provenance) return snapshot.provenance;
  if (operation?.provenance && (!snapshot || snapshot.operation_id === operation.id)) return operation.provenance;
  return null;
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

// What an operation's attempts used, in one line: "412 tokens · 3.1 s · gemma-3-270m, local"
// (tokens as the model server counted them, the model's own time, and which model answered).
// Empty when no attempt reported any.
export function usageLine(operation) {
  const usage = operation?.usage;
  if (!usage) return "";
  const tokens = usage.prompt_tokens + usage.completion_tokens;
  const seconds = Math.round(usage.model_seconds * 10) / 10;
  const parts = [`${formatNumber(tokens)} tokens`, `${formatNumber(seconds)} s`];
  const { model, route } = operation.provenance ?? {};
  if (model) parts.push(route ? `${model}, ${route}` : model);
  return parts.join(" · ");
}
