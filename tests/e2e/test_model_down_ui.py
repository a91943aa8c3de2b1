"""A model that stays down, as its owner sees it, on the product `opsctl up` runs.

The local model server is stopped: every connection to it is refused. The AI worker
does not wait for the model's silence on a refusal; it asks again within the attempt,
its circuit opens, it waits for the half-open trial, and the analysis is tried within its
three attempts before it fails (``inference.router``, ADR 59): about a minute and a half
on the defaults, here a cooldown of 2 s. All that while, the card used to say "Running"
beside a bar at 0 %, as if the model were at work; it says now that the analysis waits
for the model, then that it waits to retry and which attempt comes next, and at the end
that it failed, with the retry button.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.support.jobs_page import JOBS, add_job, open_jobs
from tests.support.ports import refusing_port
from tests.support.product import Product, opsctl_up, product_env

pytestmark = [pytest.mark.browser, pytest.mark.slow]
COOLDOWN_SECONDS = "2"  # standing for the 30 s default
# Three attempts of a cooldown or so each, and the retry delays between them (5-10 s,
# then 10-20 s): well within this on a loaded machine. Not a bound under test.
FAILED_MS = 90_000

# Every state and note beside it that the card showed, in order.
RECORD_STATUS = """selector => {
  window.__shown = [];
  const record = () => {
    const job = document.querySelector(selector);
    const state = job?.querySelector(".analysis .state")?.textContent ?? "";
    const when = job?.querySelector(".analysis__when:not([hidden])")?.textContent ?? "";
    const bar = job?.querySelector(".analysis__progress progress") ? "bar" : "";
    const shown = [state, when, bar];
    const last = window.__shown[window.__shown.length - 1];
    if (!last || last.join("|") !== shown.join("|")) window.__shown.push(shown);
  };
  new MutationObserver(record).observe(document.body, {
    subtree: true, childList: true, characterData: true, attributes: true,
  });
  record();
}"""


@pytest.fixture
def product(tmp_path: Path) -> Iterator[Product]:
    stopped_model = f"http://127.0.0.1:{refusing_port()}/v1"
    env = product_env(
        OPS_AI_LOCAL_URL=stopped_model, OPS_AI_CIRCUIT_COOLDOWN_SECONDS=COOLDOWN_SECONDS
    )
    with opsctl_up(f"sqlite:///{tmp_path / 'down.sqlite3'}", env, cwd=tmp_path) as running:
        yield running


def _operation(product: Product, job_id: str) -> dict[str, Any]:
    with httpx.Client(base_url=product.url) as client:
        product.sign_in(client)
        answer = client.get(f"/api/jobs/{job_id}/strategy-snapshot").json()
    operation: dict[str, Any] = answer["operation"]
    return operation


def test_an_analysis_whose_model_stays_down_says_it_waits_for_it_then_that_it_failed(
    page: Page, product: Product, screenshot: Any
) -> None:
    open_jobs(page, product.url.rstrip("/"), "demo")  # the demo user: Pro plan, AI on
    job = add_job(page, "Platform engineer", "Acme")
    job_id = (job.get_attribute("id") or "").removeprefix("job-")
    page.evaluate(RECORD_STATUS, JOBS)
    job.get_by_role("button", name="Start strategy snapshot").click()

    state = job.locator(".analysis .state")
    expect(state).to_have_text("Waiting for the model", timeout=20_000)
    expect(job.get_by_label("Analysis progress")).to_have_count(0)
    screenshot(page, "36-jobs-model-down-waiting-for-the-model")
    expect(state).to_have_text("Failed", timeout=FAILED_MS)
    expect(job.get_by_role("button", name="Retry analysis")).to_be_visible()
    screenshot(page, "37-jobs-model-down-failed")

    shown: list[list[str]] = page.evaluate("window.__shown")
    states = [entry[0] for entry in shown]
    assert "Running" not in states, shown  # the model never did any of it
    assert not [entry for entry in shown if entry[0] == "Waiting for the model" and entry[2]], (
        "a bar at 0 % beside the wait",
        shown,
    )
    assert "Waiting to retry" in states, shown
    whens = {entry[1] for entry in shown if entry[0] == "Waiting to retry"}
    assert any(when.endswith("attempt 2 of 3") for when in whens), shown
    assert any(when.endswith("attempt 3 of 3") for when in whens), shown

    operation = _operation(product, job_id)
    assert (operation["state"], operation["attempt"]) == ("failed", 3)
    assert operation["progress_percent"] == 0
