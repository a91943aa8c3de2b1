"""The web UI as a screen reader's and a keyboard's user meets it.

Every page, in each state it shows, passes axe-core's WCAG 2.1 A and AA rules and its best
practices, its fields' edges and the focus ring of every control Tab reaches show at 3:1
(tests/support/accessibility.py), in the light theme and, for colours, the dark one:
sign-in (and its errors), /operations (empty, with work in every state, the notifications,
the cancel dialog, an error), /jobs (empty on a Free plan; a job and a CV with an analysis
under way and its answer being written, results, the settings and their dialog, the delete
dialog) and the operator console (sign-in, queues, operations, an operation's attempts, the
bulk dialog). The main view of each is scanned again at a phone's width, in place. Then what
axe cannot see: Tab goes round a dialog, and focus stays where the keyboard acted when what
it acted on goes (a retry after an error, the console's select all, Close, a bulk action,
the last "Load more", /jobs' "Retry now"); and what a screen reader is told of an analysis
under way on /jobs."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, Route, expect

from durable_ops.api.ai_admission.v1 import ai_admission_pb2 as admission_pb
from durable_ops.api.operations.v1 import operations_pb2 as ops_pb
from durable_ops.api.operator.v1 import operator_pb2 as opb
from durable_ops.model.scope import Role
from tests.support.accessibility import Scans
from tests.support.gateway import (
    Claimed,
    LiveGateway,
    claim,
    complete,
    create_operation,
    fail,
    heartbeat,
    publish,
)
from tests.support.grpc_services import Services, metadata
from tests.support.jobs_page import JOBS, open_jobs
from tests.support.signin import dev_sign_in
from tests.support.workspace_client import ANSWER, create_cv, create_job, entitle

pytestmark = pytest.mark.browser
OPERATOR = "ops-carol"


def admit(services: Services, owner: str, task_type: str, subject: str, context: str = "") -> str:
    """An analysis started as the page starts one; its operation id."""
    request = admission_pb.AdmitRequest(
        task_type=task_type, subject_id=subject, context_ref=context, idempotency_key=""
    )
    reply = services.admission.Admit(request, metadata=metadata(Role.GATEWAY, owner))
    return str(reply.operation.id)


def finish_snapshot(services: Services, answer: dict[str, object]) -> Claimed:
    """The AI worker's part: the next strategy snapshot claimed, answered and completed."""
    claimed = claim(services, ["strategy.snapshot"])
    publish(services, claimed, answer)
    complete(services, claimed)
    return claimed


def write_draft(services: Services, claimed: Claimed, text: str, progress: int) -> None:
    """What the AI worker's lease stream sends while the model writes: progress and the
    answer so far (the page shows it as it is written)."""
    held = ops_pb.HeldLease(
        operation_id=claimed.operation_id,
        owner_id=claimed.owner,
        lease_token=claimed.lease_token,
        lease_seconds=60,
        progress_percent=progress,
        answer_text=text,
    )
    replies = services.operations.HoldLeases(
        iter([ops_pb.HoldLeasesRequest(leases=[held])]), metadata=metadata(Role.WORKER)
    )
    for reply in replies:
        assert all(not outcome.status_code for outcome in reply.outcomes), reply


# How the nearest live region around an element speaks ("polite", "off", …).
LIVE = """(element) => {
  const region = element.closest("[aria-live], [role=status], [role=alert], [role=log]");
  const implied = { status: "polite", log: "polite", alert: "assertive" };
  return region ? (region.getAttribute("aria-live") ?? implied[region.getAttribute("role")]) : null;
}"""


# The /jobs page's announcer: what its analyses' progress says to a screen reader.
ANNOUNCER = "main > [role=status]"


def sign_in_to_the_console(page: Page, gateway: LiveGateway, services: Services) -> None:
    """An operator's sign-in link made (as `opsctl console link` makes one) and followed."""
    made = services.operator.CreateConsoleLink(
        opb.CreateConsoleLinkRequest(), metadata=metadata(Role.OPERATOR, subject=OPERATOR)
    )
    page.goto(f"{gateway.url}/console/sign-in#link={made.link_secret}")
    page.get_by_role("button", name="Sign in to the console").click()
    page.wait_for_url(f"{gateway.url}/console")


def refuse(route: Route) -> None:
    route.fulfill(
        status=503,
        content_type="application/problem+json",
        body='{"type":"about:blank","title":"Service Unavailable","status":503,'
        '"detail":"the operations service is not reachable right now"}',
    )


# ---- signed out --------------------------------------------------------------------------------


def test_the_sign_in_pages_and_their_errors(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    scans = Scans()
    page.goto(f"{ui_gateway.url}/")
    expect(page.get_by_role("heading", name="Sign in to durable-ops")).to_be_visible()
    scans(page, "sign-in", phone=True)
    scans.focus(page, "sign-in", dark=True)

    page.get_by_role("textbox", name="Token").fill("not-a-token")
    page.get_by_role("button", name="Sign in", exact=True).click()
    expect(page.locator("#token-error")).to_be_visible()
    scans(page, "sign-in, a refused token", dark=False)

    # A user id the form's pattern lets through nowhere: the server says why, in the page.
    page.evaluate("() => { document.getElementById('dev-user').form.noValidate = true; }")
    page.get_by_label("User id").fill("not a user id")
    page.get_by_role("button", name="Sign in as this user").click()
    expect(page.locator("#dev-error")).to_be_visible()
    scans(page, "sign-in, a refused development sign-in", dark=False)

    page.goto(f"{ui_gateway.url}/?expired=1&next=%2Fjobs")
    expect(page.locator("#signin-notice")).to_be_visible()
    scans(page, "sign-in, the session ended", dark=False)

    page.goto(f"{ui_gateway.url}/no-such-page")
    expect(page.get_by_role("heading", name="Page not found")).to_be_visible()
    scans(page, "the page not found", dark=False)

    page.goto(f"{ui_gateway.url}/console")
    expect(page.get_by_role("heading", name="Operator console sign-in")).to_be_visible()
    scans(page, "console sign-in")
    page.get_by_label("Sign-in link").fill("https://example.invalid/console/sign-in#link=nope")
    page.get_by_role("button", name="Sign in to the console").click()
    expect(page.locator("#console-signin-error")).to_be_visible()
    scans(page, "console sign-in, a refused link", dark=False)
    scans.check()


# ---- /operations -------------------------------------------------------------------------------


def test_the_operations_page_in_every_state(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    scans = Scans()
    dev_sign_in(page, ui_gateway.url, "ada")
    expect(page.get_by_text("No operations yet.")).to_be_visible()
    scans(page, "/operations, empty")

    job = ("job", create_job(ui_services.workspace, "ada", title="Platform engineer"))
    cv = ("attachment", create_cv(ui_services.workspace, "ada"))
    create_operation(ui_services, "ada", subject=job, key="succeeded")
    claimed = claim(ui_services, ["strategy.snapshot"])
    publish(ui_services, claimed, ANSWER)
    complete(ui_services, claimed)
    create_operation(ui_services, "ada", task_type="cv.review", subject=cv, max_attempts=1)
    fail(ui_services, claim(ui_services, ["cv.review"]))
    create_operation(ui_services, "ada", task_type="cv.review", subject=cv, max_attempts=3)
    fail(ui_services, claim(ui_services, ["cv.review"]), retryable=True)
    create_operation(ui_services, "ada", subject=job, key="running")
    heartbeat(ui_services, claim(ui_services, ["strategy.snapshot"]), 40)
    create_operation(ui_services, "ada", subject=job, key="queued")

    page.reload()
    expect(page.locator("li.op")).to_have_count(5)
    expect(page.locator(".note")).to_have_count(2)
    scans(page, "/operations, queued, running, waiting to retry, failed and succeeded", phone=True)
    scans.focus(page, "/operations")

    page.locator("#bell").click()
    expect(page.locator("#notifications-heading")).to_be_focused()
    scans(page, "/operations#notifications", dark=False)

    page.get_by_role(
        "button", name="Cancel Strategy snapshot for Platform engineer at Acme"
    ).first.focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("dialog")).to_be_visible()
    scans(page, "/operations, the cancel dialog")
    scans.focus(page, "/operations, the cancel dialog")
    page.keyboard.press("Escape")

    page.route("**/api/operations?*", refuse)
    page.reload()
    expect(page.get_by_text("Operations could not be loaded.")).to_be_visible()
    scans(page, "/operations, the list could not be loaded", dark=False)
    scans.check()


# ---- /jobs ------------------------------------------------------------------------------------


def test_the_jobs_page_in_every_state(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    scans = Scans()
    open_jobs(page, ui_gateway.url, "bob")  # a Free plan, nothing added yet
    expect(page.get_by_text("No jobs yet")).to_be_visible()
    expect(page.locator("#plan-notice")).to_be_visible()
    scans(page, "/jobs, empty, on a Free plan")

    entitle(ui_services.db, "alice")
    engineer = create_job(ui_services.workspace, "alice", title="Platform engineer")
    analyst = create_job(ui_services.workspace, "alice", title="Data analyst")
    cv = create_cv(ui_services.workspace, "alice")
    # The analyst's snapshot twice over: its newest result, and an earlier one to link to.
    admit(ui_services, "alice", "strategy.snapshot", analyst, cv)
    earlier = finish_snapshot(ui_services, ANSWER)
    admit(ui_services, "alice", "strategy.snapshot", analyst)
    finish_snapshot(ui_services, {**ANSWER, "fit_score": None})
    # The engineer's: a result, then a run under way writing its answer.
    admit(ui_services, "alice", "strategy.snapshot", engineer, cv)
    finish_snapshot(ui_services, ANSWER)
    admit(ui_services, "alice", "strategy.snapshot", engineer, cv)
    running = claim(ui_services, ["strategy.snapshot"])
    write_draft(ui_services, running, '{"fit_score": 78, "summary": "Strong on Python, lig', 35)
    # The CV's review failed: it offers a retry.
    admit(ui_services, "alice", "cv.review", cv)
    fail(ui_services, claim(ui_services, ["cv.review"]))

    open_jobs(page, ui_gateway.url, "alice")
    engineer_card = page.locator(f"#job-{engineer}")
    expect(engineer_card.locator(".analysis__draft")).to_contain_text("Strong on Python")
    expect(
        page.locator(f"#attachment-{cv}").get_by_role(
            "button", name="Retry analysis: CV review for cv.txt"
        )
    ).to_be_visible()
    expect(page.locator(JOBS)).to_have_count(2)
    engineer_card.locator("summary").click()  # its description open
    # The card's result is said politely when it comes; its progress through the page's one
    # announcer (ANNOUNCER), not by the status line as well; the answer being written is not
    # said: a screen reader would read it out a word at a time.
    assert engineer_card.locator(".analysis").evaluate(LIVE) == "polite"
    assert page.locator(ANNOUNCER).evaluate(LIVE) == "polite"
    assert engineer_card.locator(".analysis .state").evaluate(LIVE) == "off"
    assert engineer_card.locator(".analysis__draft").evaluate(LIVE) == "off"
    scans(
        page,
        "/jobs, results, an analysis under way and its answer so far, a failed one",
        phone=True,
    )
    scans.focus(page, "/jobs")

    page.goto(f"{ui_gateway.url}/jobs?result={earlier.operation_id}#job-{analyst}")
    expect(page.locator(".analysis__earlier")).to_be_visible()
    scans(page, "/jobs, an earlier result opened from its link", dark=False)

    page.get_by_role("button", name="Delete job: Data analyst at Acme").click()
    expect(page.get_by_role("dialog", name="Delete this job?")).to_be_visible()
    scans(page, "/jobs, the delete dialog")
    page.keyboard.press("Escape")

    page.get_by_label("Privacy").select_option("external_allowed")
    expect(page.get_by_role("dialog", name="Allow an external model?")).to_be_visible()
    scans(page, "/jobs, the settings' dialog")
    scans.check()


# ---- the operator console ----------------------------------------------------------------------


def test_the_operator_console(page: Page, ui_gateway: LiveGateway, ui_services: Services) -> None:
    scans = Scans()
    job = ("job", create_job(ui_services.workspace, "erin"))
    failed = create_operation(ui_services, "erin", subject=job, max_attempts=1)
    fail(ui_services, claim(ui_services, ["strategy.snapshot"]))
    create_operation(ui_services, "erin", subject=job, key="running")
    heartbeat(ui_services, claim(ui_services, ["strategy.snapshot"]), 20)
    create_operation(ui_services, "frank", task_type="cv.review", subject=("attachment", "cv-1"))
    ui_services.operator.PauseTaskType(
        opb.PauseTaskTypeRequest(task_type="cv.review"),
        metadata=metadata(Role.OPERATOR, subject=OPERATOR),
    )

    sign_in_to_the_console(page, ui_gateway, ui_services)
    expect(page.locator("#console-ops tbody tr")).to_have_count(3)
    expect(page.locator("#console-queues tbody tr")).to_have_count(2)
    scans(page, "console, queues and operations", dark=False, phone=True)

    page.get_by_role("button", name=f"Show operation {failed.id}").click()
    expect(
        page.locator("#console-detail").get_by_role("heading", name="Attempt history")
    ).to_be_visible()
    scans(page, "console, an operation's attempts")
    scans.focus(page, "console", dark=True)

    page.locator(f'#console-ops tr[data-id="{failed.id}"]').get_by_role("checkbox").check()
    page.get_by_role("button", name="Retry selected").click()
    expect(page.get_by_role("dialog")).to_be_visible()
    scans(page, "console, the bulk dialog")
    page.keyboard.press("Escape")

    page.get_by_label("Older than").fill("soon")
    page.get_by_role("button", name="Search").click()
    expect(page.locator("#console-search-error")).to_be_visible()
    scans(page, "console, a refused search", dark=False)
    scans.check()


# ---- from the keyboard -------------------------------------------------------------------------

FOCUSED = "() => document.activeElement?.outerHTML.slice(0, 120) ?? null"
RING = "(element) => getComputedStyle(element).outlineStyle"


def test_tab_goes_round_a_dialog_and_escape_gives_focus_back(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """A modal <dialog> alone lets Tab leave it for the document past its last button."""
    create_operation(ui_services, "ada", subject=("job", create_job(ui_services.workspace, "ada")))
    dev_sign_in(page, ui_gateway.url, "ada")
    cancel = page.get_by_role("button", name="Cancel Strategy snapshot for Engineer at Acme")
    cancel.focus()
    page.keyboard.press("Enter")
    dialog = page.get_by_role("dialog", name="Cancel this operation?")
    keep = dialog.get_by_role("button", name="Keep running")
    stop = dialog.get_by_role("button", name="Cancel operation")
    expect(keep).to_be_focused()
    page.keyboard.press("Tab")
    expect(stop).to_be_focused()
    page.keyboard.press("Tab")
    expect(keep).to_be_focused()
    page.keyboard.press("Shift+Tab")
    expect(stop).to_be_focused()
    page.keyboard.press("Escape")
    expect(dialog).to_have_count(0)
    expect(cancel).to_be_focused()


def test_a_retry_after_an_error_leaves_focus_on_the_list_it_loaded_with_its_ring(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """The Retry of the error (the placeholder's, then the banner's) went with the error,
    and focus with it, to the page; and a card's title hid the ring of a keyboard's focus."""
    create_operation(ui_services, "ada", subject=("job", create_job(ui_services.workspace, "ada")))
    page.route("**/api/operations?*", refuse)
    dev_sign_in(page, ui_gateway.url, "ada")
    title = page.locator("li.op .op__title")

    page.get_by_role("button", name="Retry").focus()
    page.unroute("**/api/operations?*")
    page.keyboard.press("Enter")
    expect(title).to_be_focused()
    assert title.evaluate(RING) != "none", "the focused title shows no ring"

    page.route("**/api/operations?*", refuse)
    page.evaluate("() => { window.location.hash = 'look-again'; }")  # the list loads again
    banner = page.locator(".banner").filter(has_text="Updates paused")
    expect(banner).to_be_visible()
    banner.get_by_role("button", name="Retry").focus()
    page.unroute("**/api/operations?*")
    page.keyboard.press("Enter")
    expect(banner).to_be_hidden()
    expect(title).to_be_focused()
    assert title.evaluate(RING) != "none", "the focused title shows no ring"


def test_the_console_keeps_focus_where_the_keyboard_acted(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """Select all drew the list again, Close sent focus to the first row, a bulk action
    disabled the button that had focus, and the last "Load more" hid itself: each time
    focus fell to the page."""
    job = ("job", create_job(ui_services.workspace, "erin"))
    created = [create_operation(ui_services, "erin", subject=job, key=f"op-{n}") for n in range(51)]
    sign_in_to_the_console(page, ui_gateway, ui_services)
    rows = page.locator("#console-ops tbody tr")
    expect(rows).to_have_count(50)

    more = page.get_by_role("button", name="Load more")
    more.focus()
    page.keyboard.press("Enter")
    expect(rows).to_have_count(51)
    expect(more).to_be_hidden()
    oldest = page.get_by_role("button", name=f"Show operation {created[0].id}")
    expect(oldest).to_be_focused()

    third = page.get_by_role("button", name=f"Show operation {created[-3].id}")
    third.focus()
    page.keyboard.press("Enter")
    expect(page.locator("#console-detail")).to_be_focused()
    close = page.get_by_role("button", name="Close")
    close.focus()
    page.keyboard.press("Enter")
    expect(third).to_be_focused()

    every = page.get_by_role("checkbox", name="Select every operation shown")
    every.focus()
    page.keyboard.press("Space")
    expect(page.locator("#console-selected")).to_have_text("51 operations selected")
    expect(every).to_be_focused()
    page.keyboard.press("Space")
    expect(page.locator("#console-selected")).to_have_text("None selected")
    expect(every).to_be_focused()

    rows.first.get_by_role("checkbox").check()
    cancel = page.get_by_role("button", name="Cancel selected")
    cancel.focus()
    page.keyboard.press("Enter")
    page.get_by_role("dialog").get_by_role("button", name="Cancel 1 operation").click()
    expect(page.locator("#console-bulk-status")).to_have_text("Cancelled 1 operation.")
    expect(cancel).to_be_focused()
    expect(cancel).to_be_disabled()  # nothing selected now: said, not a lost focus


def test_retry_now_leaves_focus_on_the_card_it_read_again_with_its_ring(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """/jobs' "Retry now" went with the banner once the reads it retried came back, and sent
    focus to <main>, which shows no ring: a keyboard's user was left nowhere to be seen."""
    create_job(ui_services.workspace, "alice", title="Platform engineer")
    page.route("**/strategy-snapshot", lambda route: route.abort("connectionrefused"))
    open_jobs(page, ui_gateway.url, "alice")
    banner = page.get_by_role("alert").filter(has_text="Updates paused.")
    banner.get_by_role("button", name="Retry now").focus()
    page.unroute("**/strategy-snapshot")
    page.keyboard.press("Enter")
    expect(banner).to_be_hidden()
    title = page.locator(JOBS).get_by_role("heading", name="Platform engineer")
    expect(title).to_be_focused()
    assert title.evaluate(RING) != "none", "the focused title shows no ring"


# ---- what a screen reader hears ---------------------------------------------------------------

# Every text the announcer is given from now on, in window.said, read from the mutation
# records: two given in one task (a stream's event and a poll's answer handled together)
# reach the observer in one call.
RECORD_SAID = """(region) => {
  window.said = [];
  const record = (records) => {
    const added = records.flatMap((record) => [...record.addedNodes]);
    window.said.push(...added.map((node) => node.textContent));
  };
  const changes = { childList: true, characterData: true, subtree: true };
  new MutationObserver(record).observe(region, changes);
}"""


def test_an_analysis_tells_its_progress_once_a_step(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """The progress of a running analysis reached no screen reader: its bar moved without a
    word, and its status line said a bare "Running", of no card named. The page's one polite
    announcer says its start, each new phase, every 25 % and its end, each once, and nothing
    at each move between."""
    entitle(ui_services.db, "alice")
    create_job(ui_services.workspace, "alice", title="Platform engineer")
    open_jobs(page, ui_gateway.url, "alice")
    card = page.locator(JOBS)
    start = card.get_by_role("button", name="Start strategy snapshot")
    expect(start).to_be_visible()
    page.locator(ANNOUNCER).evaluate(RECORD_SAID)
    name = "Strategy snapshot for Platform engineer at Acme"
    bar = card.get_by_role("progressbar")

    start.click()
    expect(card.locator(".analysis .state")).to_have_text("Queued")
    claimed = claim(ui_services, ["strategy.snapshot"])
    expect(card.locator(".analysis .state")).to_have_text("Waiting for the model")
    for percent in (10, 35, 40, 60):
        write_draft(ui_services, claimed, '{"summary": "Strong on Python', percent)
        expect(bar).to_have_js_property("value", percent)
    publish(ui_services, claimed, ANSWER)
    complete(ui_services, claimed)
    expect(card.get_by_text("Fit: 82")).to_be_visible()
    said = [f"{name}: {phase}." for phase in ("started", "waiting for the model", "running")]
    said += [f"{name}: {phase}." for phase in ("25% done", "50% done", "finished")]
    assert page.evaluate("() => window.said") == said

    start.click()  # a run that fails says so
    expect(card.locator(".analysis .state")).to_have_text("Queued")
    claimed = claim(ui_services, ["strategy.snapshot"])
    expect(card.locator(".analysis .state")).to_have_text("Waiting for the model")
    fail(ui_services, claimed)
    expect(card.locator(".analysis .state")).to_have_text("Failed")
    said += [f"{name}: {phase}." for phase in ("started", "waiting for the model", "failed")]
    assert page.evaluate("() => window.said") == said
