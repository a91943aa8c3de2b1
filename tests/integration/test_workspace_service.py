"""The Workspace service over gRPC, on both engines, as the gateway calls it: what a page of
CVs leaves out, the pages of the jobs list, and its own check of the AI settings a change
names (the gateway checks them first; the service does not count on it)."""

from __future__ import annotations

import grpc

from durable_ops.api.workspace.v1 import workspace_pb2 as wpb
from durable_ops.model.scope import Role
from tests.support.clock import ManualClock
from tests.support.grpc_services import Services, metadata
from tests.support.operations_client import expect_failure
from tests.support.workspace_client import CV_TEXT, create_cv, create_job, entitle


def _settings(services: Services, change: wpb.UpdateAiSettingsRequest) -> wpb.AiSettings:
    settings: wpb.AiSettings = services.workspace.UpdateAiSettings(
        change, metadata=metadata(Role.GATEWAY, "alice")
    )
    return settings


def test_a_page_of_cvs_carries_each_ones_length_and_none_of_their_texts(
    services: Services,
) -> None:
    """A CV is up to 200,000 characters: a page of them is names and lengths, and a CV's
    text is read one CV at a time."""
    cv = create_cv(services.workspace, "alice", CV_TEXT)
    alice = metadata(Role.GATEWAY, "alice")
    page = services.workspace.ListAttachments(wpb.ListRequest(), metadata=alice)
    (listed,) = page.attachments
    assert (listed.id, listed.filename, listed.text, listed.text_length) == (
        cv,
        "cv.txt",
        "",
        len(CV_TEXT),
    )
    one = services.workspace.GetAttachment(
        wpb.GetAttachmentRequest(attachment_id=cv), metadata=alice
    )
    assert one.text == CV_TEXT


def test_the_jobs_come_in_pages_newest_first_each_one_once(
    services: Services, clock: ManualClock
) -> None:
    """Three of the five jobs are saved in the same instant: their ids order them, and no
    page repeats or skips one; another owner's job is on none."""
    made: list[str] = []
    for number in range(5):
        if number in (1, 4):
            clock.advance(1)
        made.append(create_job(services.workspace, "alice", title=f"Job {number}"))
    create_job(services.workspace, "bob")
    newest_first = [made[4], *sorted(made[1:4], reverse=True), made[0]]

    pages: list[list[str]] = []
    token = ""
    while True:
        page = services.workspace.ListJobs(
            wpb.ListRequest(page_size=2, page_token=token), metadata=metadata(Role.GATEWAY, "alice")
        )
        pages.append([job.id for job in page.jobs])
        token = page.next_page_token
        if not token or len(pages) > len(made):
            break
    assert pages == [newest_first[0:2], newest_first[2:4], newest_first[4:]]


def test_a_change_naming_only_the_privacy_leaves_ai_as_it_was(services: Services) -> None:
    entitle(services.db, "alice")  # Pro, AI on
    changed = _settings(services, wpb.UpdateAiSettingsRequest(privacy="external_allowed"))
    assert (changed.ai_enabled, changed.privacy) == (True, "external_allowed")
    unchanged = _settings(services, wpb.UpdateAiSettingsRequest())
    assert (unchanged.ai_enabled, unchanged.privacy) == (True, "external_allowed")
    switched_off = _settings(services, wpb.UpdateAiSettingsRequest(ai_enabled=False))
    assert (switched_off.ai_enabled, switched_off.privacy) == (False, "external_allowed")


def test_a_privacy_the_service_does_not_know_is_refused_by_name_and_changes_nothing(
    services: Services,
) -> None:
    entitle(services.db, "alice", ai_enabled=False)
    for privacy in ("everywhere", "LOCAL_ONLY", ""):
        refused = expect_failure(
            lambda privacy=privacy: _settings(  # type: ignore[misc]
                services, wpb.UpdateAiSettingsRequest(ai_enabled=True, privacy=privacy)
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "invalid_argument",
            field="privacy",
        )
        assert refused.details == "privacy: must be local_only or external_allowed", privacy
    settings = services.workspace.GetAiSettings(
        wpb.GetAiSettingsRequest(), metadata=metadata(Role.GATEWAY, "alice")
    )
    assert (settings.ai_enabled, settings.privacy) == (False, "local_only")  # refused whole
