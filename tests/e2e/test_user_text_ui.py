"""User text the layout did not expect, in a real browser: a job title of 200 letters
without a space, a file name of 255, on a wide screen and on a 375-px phone. Each
stays in its card and wraps there; nothing pushes the page sideways, a state badge
off the screen or a button's label out of its button. A right-to-left name (an Arabic
file name) is laid out right to left wherever it shows."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from durable_ops.api.workspace.v1 import workspace_pb2 as workspace_pb
from durable_ops.model.scope import Role
from tests.support.gateway import LiveGateway, claim, complete, create_operation, publish
from tests.support.grpc_services import Services, metadata
from tests.support.signin import dev_sign_in
from tests.support.workspace_client import ANSWER, CV_TEXT, JOB_TEXT, entitle

pytestmark = pytest.mark.browser
Screenshot = Callable[[Page, str], Path]
LONG_TITLE = "Principal" + "X" * 191  # JOB_TITLE_MAX, and not one place to break a line
LONG_COMPANY = "Acme" + "Y" * 196
LONG_FILENAME = "cv-" + "Z" * 248 + ".txt"  # ATTACHMENT_FILENAME_MAX
ARABIC_FILENAME = "السيرة الذاتية.txt"
PHONE = {"width": 375, "height": 812}
CARDS = "li.op, li.item, li.note"
# Every element of each card whose box reaches past the card's right edge.
OUT_OF_CARD = """selector => {
  const out = [];
  for (const card of document.querySelectorAll(selector)) {
    const edge = card.getBoundingClientRect().right + 0.5;
    for (const element of card.querySelectorAll("*")) {
      const box = element.getBoundingClientRect();
      if (box.width > 0 && box.right > edge) out.push(`${element.tagName}.${element.className}`);
    }
  }
  return out;
}"""
# Buttons whose label is wider than the button shows.
CUT_LABELS = """() => [...document.querySelectorAll("main button")]
  .filter((button) => button.offsetParent !== null && button.scrollWidth > button.clientWidth)
  .map((button) => button.getAttribute("aria-label") ?? button.textContent)"""


@pytest.fixture
def long_names(ui_services: Services) -> None:
    """Ada (Pro) with a job and a CV of long names: a snapshot of the job succeeded (so a
    notification names it), a review of the CV is queued (so its card offers Cancel)."""
    entitle(ui_services.db, "ada")
    job = ui_services.workspace.CreateJob(
        workspace_pb.CreateJobRequest(title=LONG_TITLE, company=LONG_COMPANY, description=JOB_TEXT),
        metadata=metadata(Role.GATEWAY, "ada"),
    )
    cv = ui_services.workspace.CreateAttachment(
        workspace_pb.CreateAttachmentRequest(kind="cv", filename=LONG_FILENAME, text=CV_TEXT),
        metadata=metadata(Role.GATEWAY, "ada"),
    )
    create_operation(ui_services, "ada", subject=("job", job.id))
    claimed = claim(ui_services, ["strategy.snapshot"])
    publish(ui_services, claimed, ANSWER)
    complete(ui_services, claimed)
    create_operation(ui_services, "ada", task_type="cv.review", subject=("attachment", cv.id))


def assert_fits(page: Page) -> None:
    sideways = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert sideways <= 0, f"the page scrolls sideways by {sideways}px"
    assert page.evaluate(OUT_OF_CARD, CARDS) == []
    assert page.evaluate(CUT_LABELS) == []


def show_operations(page: Page, gateway: LiveGateway) -> None:
    dev_sign_in(page, gateway.url, "ada")
    expect(page.locator("li.op .op__subject-name")).to_have_count(2)
    expect(page.locator("li.note .note__about")).to_contain_text(LONG_TITLE)
    badges = page.locator("li.op .state")
    for index in range(badges.count()):
        expect(badges.nth(index)).to_be_in_viewport(ratio=1)


def show_jobs(page: Page, gateway: LiveGateway) -> None:
    page.goto(f"{gateway.url}/jobs")
    expect(page.get_by_role("heading", name=LONG_TITLE)).to_be_visible()
    expect(page.locator("li.item .analysis__status .state")).to_have_text("Queued")


def test_long_names_wrap_inside_their_cards_on_a_wide_screen(
    page: Page, ui_gateway: LiveGateway, long_names: None, screenshot: Screenshot
) -> None:
    show_operations(page, ui_gateway)
    assert_fits(page)
    screenshot(page, "90-long-names-operations")
    show_jobs(page, ui_gateway)
    assert_fits(page)
    screenshot(page, "91-long-names-jobs")


def test_long_names_wrap_inside_their_cards_on_a_phone(
    browser: Browser, ui_gateway: LiveGateway, long_names: None, screenshot: Screenshot
) -> None:
    context = browser.new_context(viewport=PHONE, is_mobile=True)  # type: ignore[arg-type]
    try:
        page = context.new_page()
        show_operations(page, ui_gateway)
        cancel = page.get_by_role("button", name="Cancel CV review for")
        expect(cancel).to_have_text("Cancel")
        expect(cancel).to_be_in_viewport(ratio=1)
        assert_fits(page)
        screenshot(page, "92-long-names-operations-phone")
        show_jobs(page, ui_gateway)
        assert_fits(page)
        screenshot(page, "93-long-names-jobs-phone")
    finally:
        context.close()


def direction(page: Page, selector: str) -> str:
    first = page.locator(selector).first
    return str(first.evaluate("element => getComputedStyle(element).direction"))


def test_a_right_to_left_name_is_laid_out_right_to_left(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    entitle(ui_services.db, "ada")
    cv = ui_services.workspace.CreateAttachment(
        workspace_pb.CreateAttachmentRequest(kind="cv", filename=ARABIC_FILENAME, text=CV_TEXT),
        metadata=metadata(Role.GATEWAY, "ada"),
    )
    create_operation(ui_services, "ada", task_type="cv.review", subject=("attachment", cv.id))
    complete(ui_services, claim(ui_services, ["cv.review"]))  # its notification names it too

    dev_sign_in(page, ui_gateway.url, "ada")
    expect(page.locator("li.op .op__subject-name")).to_have_text(ARABIC_FILENAME)
    assert direction(page, "li.op .op__subject-name") == "rtl"
    name_in_note = page.locator("li.note .note__about [dir='auto']")
    expect(name_in_note).to_have_text(ARABIC_FILENAME)
    assert direction(page, "li.note .note__about [dir='auto']") == "rtl"

    page.goto(f"{ui_gateway.url}/jobs")
    expect(page.get_by_role("heading", name=ARABIC_FILENAME)).to_be_visible()
    assert direction(page, f"#attachment-{cv.id} h3") == "rtl"
