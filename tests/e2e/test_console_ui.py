"""The operator console in a real browser (issue 37, point 5; ADR 0045): sign-in only with
a link from `opsctl console link` (an owner's session gets nothing), search, bulk retry
after a confirmation that names the count, one operation's attempt history, at 390 and
1280 px."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Locator, Page, Route, expect

from durable_ops.api.operations.v1 import operations_pb2 as ops_pb
from durable_ops.api.operator.v1 import operator_pb2 as opb
from durable_ops.model.scope import Role
from tests.support.gateway import LiveGateway, claim, create_operation
from tests.support.grpc_services import Services, metadata
from tests.support.signin import dev_sign_in
from tests.support.workspace_client import create_job

pytestmark = pytest.mark.browser
Screenshot = Callable[[Page, str], Path]
PHONE = {"width": 390, "height": 844}
OPERATOR = "ops-carol"
FAILED = ops_pb.OPERATION_STATE_FAILED
QUEUED = ops_pb.OPERATION_STATE_QUEUED


def console_link(services: Services, gateway: LiveGateway) -> str:
    """What `opsctl console link` prints: the secret in the fragment."""
    made: opb.CreateConsoleLinkResponse = services.operator.CreateConsoleLink(
        opb.CreateConsoleLinkRequest(), metadata=metadata(Role.OPERATOR, subject=OPERATOR)
    )
    return f"{gateway.url}/console/sign-in#link={made.link_secret}"


def sign_in_to_console(page: Page, services: Services, gateway: LiveGateway) -> None:
    page.goto(console_link(services, gateway))
    expect(page.get_by_label("Sign-in link")).not_to_have_value("")
    page.get_by_role("button", name="Sign in to the console").click()
    page.wait_for_url(f"{gateway.url}/console")
    expect(page.locator("#console-operator")).to_have_text(OPERATOR)


def fail_for_good(
    services: Services,
    owner: str,
    *,
    task_type: str = "strategy.snapshot",
    code: str = "model_error",
    message: str = "the model said no",
    tokens: tuple[int, int] | None = None,
) -> str:
    """An operation whose one attempt failed permanently, reporting ``tokens`` used, of a
    real job: an operator's retry of an analysis of a missing one is refused (ADR 65)."""
    job = ("job", create_job(services.workspace, owner))
    created = create_operation(services, owner, task_type=task_type, max_attempts=1, subject=job)
    claimed = claim(services, [task_type])
    assert claimed.operation_id == created.id
    item = ops_pb.SettleOperationsRequest.Item(owner_id=owner)
    if tokens is not None:
        item.usage.CopyFrom(
            ops_pb.Usage(prompt_tokens=tokens[0], completion_tokens=tokens[1], model_ms=900)
        )
    item.fail.CopyFrom(
        ops_pb.FailOperationRequest(
            operation_id=created.id,
            lease_token=claimed.lease_token,
            retryable=False,
            failure_code=code,
            failure_message=message,
        )
    )
    reply: ops_pb.LeaseMutationsResponse = services.operations.SettleOperations(
        ops_pb.SettleOperationsRequest(items=[item]), metadata=metadata(Role.WORKER)
    )
    assert not reply.outcomes[0].status_code, reply.outcomes[0].error_code
    return created.id


def state_of(services: Services, owner: str, operation_id: str) -> int:
    found: ops_pb.Operation = services.operations.GetOperation(
        ops_pb.GetOperationRequest(operation_id=operation_id),
        metadata=metadata(Role.GATEWAY, owner),
    )
    return int(found.state)


def rows(page: Page) -> Locator:
    return page.locator("#console-ops tbody tr")


def row(page: Page, operation_id: str) -> Locator:
    return page.locator(f'#console-ops tr[data-id="{operation_id}"]')


def search(page: Page, **fields: str) -> None:
    page.get_by_role("button", name="Clear").click()
    labels = {
        "owner": "Owner",
        "task_type": "Task type",
        "older_than": "Older than",
        "failure_code": "Failure code",
    }
    for name, value in fields.items():
        if name == "state":
            page.get_by_label("State").select_option(value)
        else:
            page.get_by_role("textbox", name=labels[name], exact=True).fill(value)
    page.get_by_role("button", name="Search").click()


# ---- sign-in ------------------------------------------------------------------------------


def test_the_console_needs_an_operator_sign_in_and_an_owner_session_gets_nothing(
    page: Page, ui_services: Services, ui_gateway: LiveGateway, screenshot: Screenshot
) -> None:
    hidden = fail_for_good(ui_services, "alice")
    dev_sign_in(page, ui_gateway.url, "alice", then="/console")  # an owner's session
    expect(page.get_by_role("heading", name="Operator console sign-in")).to_be_visible()
    expect(page.get_by_text("opsctl console link", exact=True)).to_be_visible()
    expect(page.locator("header.console-header")).to_be_hidden()
    assert hidden not in page.content()
    api = page.request.get(f"{ui_gateway.url}/console/api/operations")
    assert api.status == 401
    assert hidden not in api.text()
    screenshot(page, "console-01-sign-in")

    link = console_link(ui_services, ui_gateway)
    page.goto(link)
    assert "#link=" not in page.url  # the secret leaves the address bar at once
    page.get_by_role("button", name="Sign in to the console").click()
    page.wait_for_url(f"{ui_gateway.url}/console")
    expect(page.locator("#console-operator")).to_have_text(OPERATOR)
    expect(row(page, hidden)).to_be_visible()

    # A link works once.
    page.goto(link)
    page.get_by_role("button", name="Sign in to the console").click()
    expect(page.get_by_role("alert")).to_contain_text("already used")

    page.goto(f"{ui_gateway.url}/console")
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Operator console sign-in")).to_be_visible()
    assert page.request.get(f"{ui_gateway.url}/console/api/queues").status == 401
    # The owner's own session was never touched.
    page.goto(f"{ui_gateway.url}/operations")
    page.wait_for_url(f"{ui_gateway.url}/operations")


def test_the_sign_in_button_waits_for_the_page_script(page: Page, ui_gateway: LiveGateway) -> None:
    """Sent before the script took it over, the form would go as a plain GET, the pasted
    link's secret in the address bar and the server's log."""
    held: list[Route] = []
    page.route(re.compile(r"/static/console-signin\.js"), lambda route: held.append(route))
    page.goto(f"{ui_gateway.url}/console/sign-in", wait_until="commit")
    button = page.get_by_role("button", name="Sign in to the console")
    expect(button).to_be_disabled()
    while not held:
        page.wait_for_timeout(20)
    held[0].continue_()
    expect(button).to_be_enabled()


# ---- search and queues ----------------------------------------------------------------------


def test_search_by_owner_state_task_type_and_failure_code(
    page: Page, ui_services: Services, ui_gateway: LiveGateway, screenshot: Screenshot
) -> None:
    alice_failed = fail_for_good(ui_services, "alice", code="model_error")
    bob_failed = fail_for_good(ui_services, "bob", code="model_timeout")
    bob_queued = create_operation(ui_services, "bob", task_type="cv.review").id
    ui_services.operator.PauseTaskType(
        opb.PauseTaskTypeRequest(task_type="cv.review"),
        metadata=metadata(Role.OPERATOR, subject=OPERATOR),
    )
    sign_in_to_console(page, ui_services, ui_gateway)
    expect(rows(page)).to_have_count(3)
    queue = page.locator('#console-queues tr[data-task="cv.review"]')
    expect(queue.locator("td").first).to_have_text("1")
    expect(queue.locator("th")).to_have_text("cv.review (paused)")
    expect(page.locator("#console-paused-list li")).to_have_text(["cv.review"])

    search(page, owner="bob")
    expect(rows(page)).to_have_count(2)
    expect(row(page, alice_failed)).to_have_count(0)
    search(page, state="failed")
    expect(rows(page)).to_have_count(2)
    expect(row(page, bob_queued)).to_have_count(0)
    search(page, task_type="cv.review")
    expect(rows(page)).to_have_count(1)
    expect(row(page, bob_queued)).to_be_visible()
    search(page, failure_code="model_timeout")
    expect(rows(page)).to_have_count(1)
    expect(row(page, bob_failed)).to_be_visible()
    search(page, older_than="1h")
    expect(page.get_by_text("No operations match.")).to_be_visible()
    search(page, older_than="soon")
    expect(page.locator("#console-search-error")).to_contain_text(
        "Older than 'soon' is not a duration such as 90s"
    )
    screenshot(page, "console-02-search")


# ---- bulk retry -----------------------------------------------------------------------------


def test_bulk_retry_asks_first_naming_the_count_and_retries_the_selected(
    page: Page, ui_services: Services, ui_gateway: LiveGateway, screenshot: Screenshot
) -> None:
    chosen = [fail_for_good(ui_services, owner) for owner in ("alice", "bob", "carol")]
    left = fail_for_good(ui_services, "dave")
    owners = dict(zip(chosen, ("alice", "bob", "carol"), strict=True))
    sign_in_to_console(page, ui_services, ui_gateway)
    expect(rows(page)).to_have_count(4)
    retry = page.get_by_role("button", name="Retry selected")
    expect(retry).to_be_disabled()
    for operation_id in chosen:
        row(page, operation_id).get_by_role("checkbox").check()
    expect(page.locator("#console-selected")).to_have_text("3 operations selected")

    retry.click()
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_role("heading")).to_have_text("Retry 3 operations?")
    expect(dialog.get_by_role("button", name="Keep them")).to_be_focused()
    screenshot(page, "console-03-confirm-retry")
    page.keyboard.press("Escape")  # the safe answer: nothing happens
    expect(dialog).to_have_count(0)
    assert [state_of(ui_services, owners[i], i) for i in chosen] == [FAILED] * 3

    retry.click()
    page.get_by_role("dialog").get_by_role("button", name="Retry 3 operations").click()
    expect(page.locator("#console-bulk-status")).to_have_text("Retried 3 operations.")
    assert [state_of(ui_services, owners[i], i) for i in chosen] == [QUEUED] * 3
    assert state_of(ui_services, "dave", left) == FAILED
    expect(page.locator("#console-selected")).to_have_text("None selected")
    expect(row(page, left)).to_have_attribute("data-state", "failed")


# ---- attempt history ------------------------------------------------------------------------


def test_an_operation_shows_its_attempt_history_with_tokens_and_failure_messages(
    page: Page, ui_services: Services, ui_gateway: LiveGateway, screenshot: Screenshot
) -> None:
    failed = fail_for_good(
        ui_services, "erin", code="model_timeout", message="no answer in 60 s", tokens=(1200, 345)
    )
    sign_in_to_console(page, ui_services, ui_gateway)
    row(page, failed).get_by_role("button", name=f"Show operation {failed}").click()
    detail = page.locator("#console-detail")
    expect(detail).to_be_focused()
    expect(detail.get_by_role("heading", name="Attempt history")).to_be_visible()
    history = detail.get_by_role("table")
    expect(history.locator("tbody tr")).to_have_count(1)
    cells = history.locator("tbody tr").first
    expect(cells).to_contain_text("1,200 in · 345 out")
    expect(cells).to_contain_text("model_timeout")
    expect(cells).to_contain_text("no answer in 60 s")
    expect(cells).to_contain_text("failed")
    expect(detail).to_contain_text("erin")
    screenshot(page, "console-04-attempt-history")


def test_the_console_fits_a_phone_and_works_from_the_keyboard(
    browser: Browser, ui_services: Services, ui_gateway: LiveGateway, screenshot: Screenshot
) -> None:
    failed = fail_for_good(ui_services, "frank")
    context = browser.new_context(viewport=PHONE)  # type: ignore[arg-type]
    try:
        page = context.new_page()
        sign_in_to_console(page, ui_services, ui_gateway)
        expect(row(page, failed)).to_be_visible()
        overflow = page.evaluate(
            "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0, f"the page scrolls sideways by {overflow}px at 390 px"
        box = row(page, failed).get_by_role("checkbox")
        box.focus()
        page.keyboard.press("Space")
        expect(page.locator("#console-selected")).to_have_text("1 operation selected")
        page.get_by_role("button", name="Retry selected").focus()
        page.keyboard.press("Enter")
        expect(page.get_by_role("dialog").get_by_role("heading")).to_have_text("Retry 1 operation?")
        screenshot(page, "console-05-phone")
        page.keyboard.press("Tab")  # from "Keep them" to the confirming button
        page.keyboard.press("Enter")
        expect(page.locator("#console-bulk-status")).to_have_text("Retried 1 operation.")
        assert state_of(ui_services, "frank", failed) == QUEUED
    finally:
        context.close()
