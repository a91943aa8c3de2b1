"""Text in any script, in a real browser: a Japanese, an Arabic and an emoji-heavy user.

A limit stated in characters counts what the server counts (code points, a line trimmed
first), never the browser's UTF-16 code units: a title of 200 emoji is taken whole, a paste
is never cut in the middle of an emoji or between a letter and its accent, and a text over
its limit is kept and said to be too long. Arabic is laid out right to left wherever the
user writes it (the forms) and wherever it shows (a model's answer, its draft, the name a
result was made with, what a form said it added).
"""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import Page, expect

from durable_ops.api.ai_admission.v1 import ai_admission_pb2 as admission_pb
from durable_ops.api.operations.v1 import operations_pb2 as ops_pb
from durable_ops.api.workspace.v1 import workspace_pb2 as workspace_pb
from durable_ops.model.scope import Role
from tests.support.gateway import (
    Claimed,
    LiveGateway,
    claim,
    complete,
    create_operation,
    publish,
)
from tests.support.grpc_services import Services, metadata
from tests.support.jobs_page import JOBS, open_jobs
from tests.support.signin import dev_sign_in
from tests.support.workspace_client import CV_TEXT, JOB_TEXT, create_cv, create_job, entitle

pytestmark = pytest.mark.browser

FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466"  # 7 code points, 11 UTF-16
ACCENTED = "e\u0301"  # "é" as a letter and its combining accent
# 200 code points (JOB_TITLE_MAX), 395 UTF-16 code units: a maxlength of 200 took half.
EMOJI_TITLE = FAMILY + ACCENTED + "\U0001f600" * 191
COMPANY = "株式会社テスト 🏢"
# 255 code points (ATTACHMENT_FILENAME_MAX), 503 UTF-16 code units.
EMOJI_FILENAME = "履歴書" + "\U0001f338" * 248 + ".txt"
ARABIC_TITLE = "مهندس برمجيات أول (بايثون)"
ARABIC_FILENAME = "السيرة الذاتية.txt"
ARABIC_SUMMARY = "تطابق جيد مع متطلبات بايثون وقواعد البيانات."
ARABIC_GAP = "لا يوجد ذكر لـ Kubernetes"
ARABIC_ANSWER = {
    "fit_score": 74,
    "summary": ARABIC_SUMMARY,
    "strengths": ["خبرة عشر سنوات في بايثون"],
    "gaps": [ARABIC_GAP],
    "next_steps": ["أضف مثالاً على العمل المناوب"],
}


def direction(page: Page, selector: str) -> str:
    return str(page.locator(selector).first.evaluate("e => getComputedStyle(e).direction"))


def paste(page: Page, selector: str, text: str) -> None:
    """As a paste arrives: a maxlength cuts it here, without a word."""
    page.locator(selector).focus()
    page.keyboard.insert_text(text)


def api_items(page: Page, gateway: LiveGateway, path: str) -> list[dict[str, object]]:
    items: list[dict[str, object]] = page.request.get(f"{gateway.url}{path}").json()["items"]
    return items


def test_a_title_and_a_file_name_of_emoji_are_taken_whole(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    assert len(EMOJI_TITLE) == 200
    assert len(EMOJI_TITLE.encode("utf-16-le")) // 2 == 395
    assert len(EMOJI_FILENAME) == 255
    open_jobs(page, ui_gateway.url, "aiko")
    paste(page, "#add-job [name=title]", EMOJI_TITLE)
    paste(page, "#add-job [name=company]", COMPANY)
    assert page.locator("#add-job [name=title]").input_value() == EMOJI_TITLE  # not one cut
    page.locator("#add-job [name=description]").fill(JOB_TEXT)
    page.get_by_role("button", name="Add job").click()
    expect(page.locator(JOBS)).to_have_count(1)
    [job] = api_items(page, ui_gateway, "/api/jobs")
    assert (job["title"], job["company"]) == (EMOJI_TITLE, COMPANY)

    paste(page, "#add-cv [name=filename]", EMOJI_FILENAME)
    assert page.locator("#add-cv [name=filename]").input_value() == EMOJI_FILENAME
    page.locator("#add-cv [name=text]").fill(CV_TEXT)
    page.get_by_role("button", name="Add CV").click()
    expect(page.locator("#add-cv .form-status")).to_contain_text(EMOJI_FILENAME)
    [cv] = api_items(page, ui_gateway, "/api/attachments")
    assert cv["filename"] == EMOJI_FILENAME


def test_a_title_over_its_limit_is_kept_and_counted_as_the_server_counts(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    open_jobs(page, ui_gateway.url, "aiko")
    form = page.get_by_role("form", name="Add a job posting")
    title = form.get_by_label("Title")
    too_long = "\U0001f600" * 201
    paste(page, "#add-job [name=title]", too_long)
    form.get_by_label("Description").fill(JOB_TEXT)
    form.get_by_role("button", name="Add job").click()
    warning = form.get_by_role("alert")
    expect(warning).to_have_text(
        "The title is 201 characters, 1 over its limit of 200. Nothing was cut: shorten it,"
        " then add the job."
    )
    expect(title).to_be_focused()
    expect(title).to_have_attribute("aria-invalid", "true")
    assert title.input_value() == too_long  # kept whole
    assert api_items(page, ui_gateway, "/api/jobs") == []  # not sent

    # The blanks around a line are trimmed before the server counts it (an ideographic
    # space too): 200 emoji between them are within the limit.
    title.fill("\u3000 " + "\U0001f600" * 200 + " \u3000")
    expect(warning).to_be_hidden()
    form.get_by_role("button", name="Add job").click()
    expect(page.locator(JOBS)).to_have_count(1)
    [job] = api_items(page, ui_gateway, "/api/jobs")
    assert job["title"] == "\U0001f600" * 200


def test_arabic_typed_into_the_forms_is_laid_out_right_to_left(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    open_jobs(page, ui_gateway.url, "amal")
    controls = [
        "#add-job [name=title]",
        "#add-job [name=company]",
        "#add-job [name=description]",
        "#add-cv [name=filename]",
        "#add-cv [name=text]",
    ]
    for control in controls:
        page.locator(control).fill(ARABIC_TITLE)
        assert direction(page, control) == "rtl", control
        page.locator(control).fill("Platform engineer")
        assert direction(page, control) == "ltr", control  # each control by its own text

    page.locator("#add-job [name=title]").fill(ARABIC_TITLE)
    page.get_by_role("button", name="Add job").click()
    added = page.locator("#add-job .form-status")
    expect(added).to_have_text(f"Job “{ARABIC_TITLE}” added.")
    # The name in the sentence keeps its own direction: its parenthesis pair stays a pair.
    expect(added.locator("[dir=auto]")).to_have_text(ARABIC_TITLE)
    assert direction(page, "#add-job .form-status [dir=auto]") == "rtl"


def admit(services: Services, owner: str, job: str, cv: str) -> None:
    request = admission_pb.AdmitRequest(
        task_type="strategy.snapshot", subject_id=job, context_ref=cv, idempotency_key=""
    )
    services.admission.Admit(request, metadata=metadata(Role.GATEWAY, owner))


def write_draft(services: Services, claimed: Claimed, text: str) -> None:
    """What the AI worker's lease stream sends while the model writes: the answer so far."""
    held = ops_pb.HeldLease(
        operation_id=claimed.operation_id,
        owner_id=claimed.owner,
        lease_token=claimed.lease_token,
        lease_seconds=60,
        progress_percent=40,
        answer_text=text,
    )
    replies = services.operations.HoldLeases(
        iter([ops_pb.HoldLeasesRequest(leases=[held])]), metadata=metadata(Role.WORKER)
    )
    for reply in replies:
        assert all(not outcome.status_code for outcome in reply.outcomes), reply


def test_an_arabic_answer_and_its_draft_are_laid_out_right_to_left(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    entitle(ui_services.db, "amal")
    job = create_job(ui_services.workspace, "amal", title=ARABIC_TITLE)
    cv = create_cv(ui_services.workspace, "amal", filename=ARABIC_FILENAME)
    admit(ui_services, "amal", job, cv)
    running = claim(ui_services, ["strategy.snapshot"])
    written = json.dumps(ARABIC_ANSWER, ensure_ascii=False)
    write_draft(ui_services, running, written[: written.index("next_steps")])

    open_jobs(page, ui_gateway.url, "amal")
    card = f"#job-{job}"
    draft = page.locator(f"{card} .analysis__draft")
    expect(draft).to_contain_text(ARABIC_GAP)
    assert direction(page, f"{card} .analysis__draft p:not(.hint):not(.analysis__score)") == "rtl"
    assert direction(page, f"{card} .analysis__draft li") == "rtl"

    publish(ui_services, running, ARABIC_ANSWER)
    complete(ui_services, running)
    result = page.locator(f"{card} .analysis__result")
    expect(result).to_contain_text(ARABIC_SUMMARY)
    assert direction(page, f"{card} .analysis__result p:not(.analysis__score)") == "rtl"
    assert direction(page, f"{card} .analysis__result li") == "rtl"
    heading = result.locator(".analysis__result-heading")
    expect(heading).to_contain_text(f"with {ARABIC_FILENAME}")
    expect(heading.locator("[dir=auto]")).to_have_text(ARABIC_FILENAME)
    assert direction(page, f"{card} .analysis__result-heading [dir=auto]") == "rtl"


# Where each of `words` starts on the screen (the left of its box), or null when not shown.
LEFTS = """(element, words) => words.map((word) => {
  const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const at = node.data.indexOf(word);
    if (at < 0) continue;
    const range = document.createRange();
    range.setStart(node, at);
    range.setEnd(node, at + word.length);
    return range.getBoundingClientRect().left;
  }
  return null;
})"""


def test_an_arabic_title_at_a_latin_company_reads_title_then_company(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """One name of two pieces of user text: each keeps its own direction, and the line the
    page's: not "at Acme Corp <title>" as one right-to-left run."""
    entitle(ui_services.db, "amal")
    title = "مهندس برمجيات"
    job = ui_services.workspace.CreateJob(
        workspace_pb.CreateJobRequest(title=title, company="Acme Corp", description=JOB_TEXT),
        metadata=metadata(Role.GATEWAY, "amal"),
    )
    create_operation(ui_services, "amal", subject=("job", job.id))
    complete(ui_services, claim(ui_services, ["strategy.snapshot"]))  # a notification too

    dev_sign_in(page, ui_gateway.url, "amal")
    name = page.locator("li.op .op__subject-name")
    expect(name).to_have_text(f"{title} at Acme Corp")
    about = page.locator("li.note .note__about")
    expect(about).to_have_text(f"Strategy snapshot for {title} at Acme Corp")
    for shown in (name, about):
        title_left, company_left = shown.evaluate(LEFTS, [title, "Acme"])
        assert title_left < company_left, shown
        pieces = shown.locator("[dir=auto]")
        assert pieces.nth(0).evaluate("e => getComputedStyle(e).direction") == "rtl"
        assert pieces.nth(1).evaluate("e => getComputedStyle(e).direction") == "ltr"


# The gap between the right edge of `line`'s text and its element's right edge, in px.
RIGHT_GAP = """(element, line) => {
  const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const at = node.data.indexOf(line);
    if (at < 0) continue;
    const range = document.createRange();
    range.setStart(node, at);
    range.setEnd(node, at + line.length);
    return element.getBoundingClientRect().right - range.getBoundingClientRect().right;
  }
  return null;
}"""


def test_each_paragraph_of_a_description_keeps_its_own_direction(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """A posting in two languages, English first: its Arabic paragraph still reads right to
    left, from the right edge, not as the English one's direction has it."""
    english = "Senior engineer in Dubai: Python, gRPC."
    arabic = "نبحث عن مهندس برمجيات أول."
    job = create_job(ui_services.workspace, "amal", f"{english}\n\n{arabic}")
    open_jobs(page, ui_gateway.url, "amal")
    card = page.locator(f"#job-{job}")
    card.locator("summary").click()
    text = card.locator(".item__description-text")
    expect(text).to_be_visible()
    assert text.evaluate(RIGHT_GAP, arabic) < 2  # set against the right edge
    assert text.evaluate(RIGHT_GAP, english) > 50  # the English one against the left


def test_a_choice_of_job_reads_title_then_company(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """An option holds text alone: a name of two pieces keeps the page's direction there
    (one right-to-left run read "at Acme Corp <title>"); a name of one piece its own."""
    entitle(ui_services.db, "amal")
    title = "مهندس برمجيات"
    with_company = create_job(ui_services.workspace, "amal", title=title)  # at Acme
    alone = ui_services.workspace.CreateJob(
        workspace_pb.CreateJobRequest(title=title, description=JOB_TEXT),
        metadata=metadata(Role.GATEWAY, "amal"),
    ).id
    cv = create_cv(ui_services.workspace, "amal", filename=ARABIC_FILENAME)
    open_jobs(page, ui_gateway.url, "amal")
    choice = page.locator(f"#attachment-{cv}").get_by_label("Job to compare with")
    two = choice.locator(f"option[value='{with_company}']")
    expect(two).to_have_text(f"{title} at Acme")
    assert two.evaluate("e => getComputedStyle(e).direction") == "ltr"
    one = choice.locator(f"option[value='{alone}']")
    assert one.evaluate("e => getComputedStyle(e).direction") == "rtl"
