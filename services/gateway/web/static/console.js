// The operator console: queues per task type, operations of every owner with search,
// one operation's attempt history, and bulk cancel and retry after a confirmation that
// names the count. Every call goes to /console/api/* with the console cookie; a 401
// (the session ended) leads back to the console's sign-in.

import { ApiError, api, post } from "./api.js";
import { AUTH_EXPIRED } from "./events.js";
import { confirmDialog } from "./dialog.js";
import { h, replaceChildren } from "./dom.js";
import { formatNumber, formatTime, stateLabel } from "./format.js";

const PAGE_SIZE = 50;
// Queue depths move on their own: read again this often while the tab is shown.
const QUEUES_REFRESH_MS = 15000;
const byId = (id) => document.getElementById(id);
const bulkMax = Number.parseInt(byId("console-bulk").dataset.max, 10) || 100;

const selected = new Set();
let shown = []; // the operations listed, in order
let nextToken = null;
let filters = {};
let listing = null; // the list request under way: a newer search aborts it

window.addEventListener(AUTH_EXPIRED, () => window.location.assign("/console"), { once: true });

byId("console-sign-out").addEventListener("click", async () => {
  try {
    await post("/console/sign-out");
  } finally {
    window.location.assign("/console");
  }
});

// ---- words and times ----------------------------------------------------------------------

function plural(count, one, many = `${one}s`) {
  return `${formatNumber(count)} ${count === 1 ? one : many}`;
}

// "3 min", "2 h 5 min", "4 d": how long ago `iso` was.
export function age(iso, now = Date.now()) {
  if (!iso) return "";
  const seconds = Math.max(0, Math.round((now - new Date(iso).getTime()) / 1000));
  if (seconds < 60) return `${seconds} s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes} min`;
  const hours = Math.floor(minutes / 60);
  if (hours < 48) return minutes % 60 ? `${hours} h ${minutes % 60} min` : `${hours} h`;
  return `${Math.floor(hours / 24)} d`;
}

function shortId(id) {
  return id.slice(0, 8);
}

function tokens(usage) {
  if (!usage) return "—";
  return `${formatNumber(usage.prompt_tokens)} in · ${formatNumber(usage.completion_tokens)} out`;
}

function stateCell(operation) {
  return h("span", { class: `state state--${operation.state}` }, stateLabel(operation));
}

function table(caption, head, rows) {
  return h(
    "table",
    { class: "console-table" },
    h("caption", { class: "visually-hidden" }, caption),
    h("thead", {}, h("tr", {}, head.map((cell) => (typeof cell === "string" ? h("th", { scope: "col" }, cell) : cell)))),
    h("tbody", {}, rows),
  );
}

// ---- queues -------------------------------------------------------------------------------

async function loadQueues() {
  const status = byId("console-queues-status");
  status.textContent = "Loading queues…";
  try {
    const found = await api("/console/api/queues");
    status.textContent = `Read at ${formatTime(found.read_at)}.`;
    const paused = new Set(found.paused_task_types ?? []);
    if (found.queues.length === 0) {
      replaceChildren(byId("console-queues"), h("p", { class: "hint" }, "No unfinished operations."));
    } else {
      const rows = found.queues.map((queue) =>
        h(
          "tr",
          { dataset: { task: queue.task_type } },
          h("th", { scope: "row" }, queue.task_type, paused.has(queue.task_type) ? h("span", { class: "console-paused__tag" }, " (paused)") : null),
          h("td", { class: "num" }, formatNumber(queue.queued)),
          h("td", { class: "num" }, formatNumber(queue.running)),
          h("td", { class: "num" }, formatNumber(queue.waiting_for_retry + queue.waiting_for_external_fallback)),
          h("td", {}, queue.oldest_queued_at ? h("time", { datetime: queue.oldest_queued_at, title: formatTime(queue.oldest_queued_at) }, age(queue.oldest_queued_at)) : "—"),
        ),
      );
      replaceChildren(
        byId("console-queues"),
        table("Unfinished operations per task type", ["Task type", "Queued", "Running", "Waiting", "Longest wait"], rows),
      );
    }
    // Paused by an operator (`opsctl tasks pause`): not claimed until resumed.
    replaceChildren(
      byId("console-paused-list"),
      found.paused_task_types.length
        ? found.paused_task_types.map((name) => h("li", {}, name))
        : [h("li", { class: "hint" }, "None paused.")],
    );
    byId("console-paused").hidden = false;
  } catch (error) {
    status.textContent = `Queues could not be read. ${error.message}`;
  }
}

byId("console-queues-refresh").addEventListener("click", loadQueues);
setInterval(() => {
  if (document.visibilityState === "visible") loadQueues();
}, QUEUES_REFRESH_MS);

// ---- operations ---------------------------------------------------------------------------

// The bulk buttons say they cannot act now with aria-disabled, not `disabled`: a button
// that becomes disabled while it has focus (its action cleared the selection) drops focus
// to the page.
function bulkAllowed() {
  return selected.size > 0 && selected.size <= bulkMax;
}

function updateSelection() {
  const count = selected.size;
  byId("console-selected").textContent = count ? `${plural(count, "operation")} selected` : "None selected";
  const tooMany = count > bulkMax;
  for (const id of ["console-retry", "console-cancel"]) byId(id).setAttribute("aria-disabled", String(!bulkAllowed()));
  byId("console-bulk-status").textContent = tooMany ? `Select at most ${bulkMax} operations for one action.` : "";
  const all = byId("console-select-all");
  if (all) {
    const onPage = shown.filter((operation) => selected.has(operation.id)).length;
    all.checked = shown.length > 0 && onPage === shown.length;
    all.indeterminate = onPage > 0 && onPage < shown.length;
  }
}

function row(operation) {
  const box = h("input", {
    type: "checkbox",
    class: "console-select",
    "aria-label": `Select operation ${shortId(operation.id)} of ${operation.owner_id}`,
    checked: selected.has(operation.id),
    onchange: (event) => {
      if (event.target.checked) selected.add(operation.id);
      else selected.delete(operation.id);
      updateSelection();
    },
  });
  return h(
    "tr",
    { dataset: { id: operation.id, state: operation.state } },
    h("td", {}, box),
    h(
      "td",
      {},
      h(
        "button",
        { type: "button", class: "console-link", "aria-label": `Show operation ${operation.id}`, onclick: () => showDetail(operation.id) },
        h("code", {}, shortId(operation.id)),
      ),
    ),
    h("td", {}, operation.owner_id),
    h("td", {}, operation.task_type),
    h("td", {}, stateCell(operation)),
    h("td", { class: "num" }, `${operation.attempt}/${operation.max_attempts}`),
    h("td", {}, h("time", { datetime: operation.created_at, title: formatTime(operation.created_at) }, `${age(operation.created_at)} ago`)),
    h("td", {}, operation.failure_code ? h("code", {}, operation.failure_code) : "—"),
  );
}

function renderList() {
  const holder = byId("console-ops");
  if (shown.length === 0) {
    replaceChildren(holder, h("p", { class: "hint" }, "No operations match."));
    updateSelection();
    return;
  }
  const all = h("input", {
    type: "checkbox",
    id: "console-select-all",
    "aria-label": "Select every operation shown",
    // Each row's box is set in place: drawn again, the list would drop this box's focus.
    onchange: (event) => {
      for (const operation of shown) {
        if (event.target.checked) selected.add(operation.id);
        else selected.delete(operation.id);
      }
      for (const box of byId("console-ops").querySelectorAll("tbody .console-select")) {
        box.checked = selected.has(box.closest("tr").dataset.id);
      }
      updateSelection();
    },
  });
  replaceChildren(
    holder,
    table(
      "Operations of every owner, newest first",
      [h("th", { scope: "col" }, all), "Operation", "Owner", "Task type", "State", "Attempt", "Created", "Failure"],
      shown.map(row),
    ),
  );
  updateSelection();
}

function query(token) {
  const params = new URLSearchParams({ page_size: String(PAGE_SIZE) });
  for (const [name, value] of Object.entries(filters)) if (value) params.set(name, value);
  if (token) params.set("page_token", token);
  return `/console/api/operations?${params}`;
}

async function loadOperations({ more = false } = {}) {
  const status = byId("console-ops-status");
  const error = byId("console-search-error");
  status.textContent = more ? "Loading more…" : "Searching…";
  error.hidden = true;
  listing?.abort();
  const mine = new AbortController();
  listing = mine;
  try {
    const page = await api(query(more ? nextToken : null), { signal: mine.signal });
    const before = shown.length;
    shown = more ? [...shown, ...page.items] : page.items;
    nextToken = page.next_page_token;
    status.textContent = `${plural(shown.length, "operation")} shown${nextToken ? "; more match" : ""}.`;
    const hadFocus = [byId("console-more"), byId("console-ops")].some((element) => element.contains(document.activeElement));
    renderList();
    byId("console-more").hidden = !nextToken;
    // "Load more" brought rows: focus goes to the first of them (the button may be gone, and
    // the list drawn again dropped any focus it held), as "Show more" does on /operations.
    if (more && hadFocus) rowButton(shown[before]?.id)?.focus();
  } catch (problem) {
    if (problem.name === "AbortError") return; // a newer search answers instead
    status.textContent = "";
    if (problem instanceof ApiError && problem.status === 401) return;
    error.textContent = searchProblem(problem.message);
    error.hidden = false;
  }
}

// "Older_than must be …" -> "Older than must be …": a field named as its label says it.
const SEARCH_LABELS = {
  owner: "Owner",
  state: "State",
  task_type: "Task type",
  older_than: "Older than",
  failure_code: "Failure code",
};

function searchProblem(message) {
  const [first, ...rest] = message.split(" ");
  const label = SEARCH_LABELS[first.toLowerCase()];
  return label ? [label, ...rest].join(" ") : message;
}

const searchForm = byId("console-search");
searchForm.addEventListener("submit", (event) => {
  event.preventDefault();
  filters = Object.fromEntries(
    [...new FormData(searchForm).entries()].map(([name, value]) => [name, String(value).trim()]),
  );
  selected.clear();
  loadOperations();
});
searchForm.addEventListener("reset", () => {
  filters = {};
  selected.clear();
  setTimeout(() => loadOperations(), 0);
});
byId("console-more").addEventListener("click", () => loadOperations({ more: true }));

// ---- bulk actions -------------------------------------------------------------------------

const VERBS = {
  retry: { title: "Retry", done: "Retried", danger: false, what: "Each goes back to its queue with a fresh attempt budget, as its owner's own retry would. Only failed or cancelled operations can be retried." },
  cancel: { title: "Cancel", done: "Cancelled", danger: true, what: "Each is cancelled as its owner's own cancel would be; a running one stops at its worker's next heartbeat." },
};

async function bulk(verb) {
  if (!bulkAllowed()) return; // aria-disabled: the button still takes a click
  const ids = shown.map((operation) => operation.id).filter((id) => selected.has(id));
  for (const id of selected) if (!ids.includes(id)) ids.push(id);
  const words = VERBS[verb];
  const count = plural(ids.length, "operation");
  const confirmed = await confirmDialog({
    title: `${words.title} ${count}?`,
    message: words.what,
    confirmLabel: `${words.title} ${count}`,
    cancelLabel: ids.length === 1 ? "Keep it" : "Keep them",
    danger: words.danger,
  });
  if (!confirmed) return;
  const status = byId("console-bulk-status");
  status.textContent = `${words.title === "Retry" ? "Retrying" : "Cancelling"} ${count}…`;
  try {
    const answer = await post(`/console/api/${verb}`, { json: { ids } });
    const refused = answer.results.filter((result) => !result.ok);
    let text = `${words.done} ${plural(answer.succeeded, "operation")}.`;
    if (refused.length) {
      const reasons = refused.slice(0, 3).map((result) => `${shortId(result.id)}: ${result.detail}`);
      text += ` ${plural(refused.length, "operation")} could not be: ${reasons.join(" ")}`;
    }
    selected.clear();
    await Promise.all([loadOperations(), loadQueues()]);
    status.textContent = text;
  } catch (problem) {
    status.textContent = problem.message;
  }
}

byId("console-retry").addEventListener("click", () => bulk("retry"));
byId("console-cancel").addEventListener("click", () => bulk("cancel"));

// ---- one operation ------------------------------------------------------------------------

function detailList(operation) {
  const entries = [
    ["Id", h("code", {}, operation.id)],
    ["Owner", operation.owner_id],
    ["Task type", operation.task_type],
    ["State", stateCell(operation)],
    ["Attempt", `${operation.attempt} of ${operation.max_attempts}`],
    ["Priority", String(operation.priority)],
    ["Subject", `${operation.subject.type} ${operation.subject.id}`],
    ["Created", formatTime(operation.created_at)],
    ["Updated", formatTime(operation.updated_at)],
    ["Lease expires", operation.lease_expires_at ? formatTime(operation.lease_expires_at) : "—"],
    ["Not before", operation.not_before ? formatTime(operation.not_before) : "—"],
    ["Next attempt", operation.next_attempt_at ? formatTime(operation.next_attempt_at) : "—"],
    ["Deadline", operation.deadline_at ? formatTime(operation.deadline_at) : "—"],
    ["Tokens", tokens(operation.usage)],
    ["Failure code", operation.failure_code ? h("code", {}, operation.failure_code) : "—"],
    ["Failure message", operation.failure_message ?? "—"],
  ];
  return h("dl", { class: "console-facts" }, entries.flatMap(([term, value]) => [h("dt", {}, term), h("dd", {}, value)]));
}

function attemptsTable(attempts) {
  if (attempts.length === 0) return h("p", { class: "hint" }, "No attempt has started yet.");
  const rows = attempts.map((attempt) =>
    h(
      "tr",
      {},
      h("th", { scope: "row" }, String(attempt.attempt)),
      h("td", {}, attempt.route),
      h("td", {}, formatTime(attempt.started_at)),
      h("td", {}, attempt.ended_at ? formatTime(attempt.ended_at) : "running"),
      h("td", {}, attempt.outcome ?? "—"),
      h("td", {}, tokens(attempt.usage)),
      h("td", {}, attempt.model ?? "—"),
      h("td", {}, attempt.failure_code ? h("code", {}, attempt.failure_code) : "—"),
      h("td", { class: "console-message" }, attempt.failure_message ?? "—"),
    ),
  );
  return table(
    "Attempt history, oldest first",
    ["#", "Route", "Started", "Ended", "Outcome", "Tokens", "Model", "Failure code", "Failure message"],
    rows,
  );
}

function rowButton(operationId) {
  return operationId ? byId("console-ops").querySelector(`tr[data-id="${CSS.escape(operationId)}"] .console-link`) : null;
}

let detailShown = null; // the operation the detail shows: Close gives focus back to its row

async function showDetail(operationId) {
  detailShown = operationId;
  const section = byId("console-detail");
  const body = byId("console-detail-body");
  section.hidden = false;
  replaceChildren(body, h("p", { class: "status", role: "status" }, "Loading…"));
  section.focus();
  try {
    const operation = await api(`/console/api/operations/${encodeURIComponent(operationId)}`);
    byId("console-detail-heading").textContent = `Operation ${shortId(operation.id)}`;
    replaceChildren(
      body,
      detailList(operation),
      h("h3", { id: "console-attempts-heading" }, "Attempt history"),
      h("div", { class: "console-scroll", tabindex: "0", role: "region", "aria-labelledby": "console-attempts-heading" }, attemptsTable(operation.attempts)),
    );
  } catch (problem) {
    replaceChildren(body, h("p", { class: "form-error", role: "alert" }, problem.message));
  }
}

// Focus goes back to the row it was opened from (the first row when a search has since
// dropped it), not to the page.
byId("console-detail-close").addEventListener("click", () => {
  byId("console-detail").hidden = true;
  (rowButton(detailShown) ?? document.querySelector(".console-link") ?? byId("console-search").elements.owner).focus();
});

loadQueues();
loadOperations();
