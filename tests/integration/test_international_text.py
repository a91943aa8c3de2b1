"""Text in any script through the gateway and the stores, on both engines: Japanese,
Arabic, emoji (astral-plane characters, four bytes of UTF-8 each), zero-width joiners and
combining accents are kept as sent, at the limits stated in characters (code points)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from durable_ops.model import bounds
from durable_ops.model.admission import Limits
from tests.support.clock import ManualClock
from tests.support.gateway import bearer, claim, complete, gateway_client, make_app, publish, run
from tests.support.grpc_services import Services, running_services
from tests.support.workspace_client import entitle

FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466"  # 7 code points
ACCENTED = "e\u0301"


def filled(max_length: int, *pieces: str) -> str:
    """``pieces`` then emoji, ``max_length`` code points in all."""
    start = "".join(pieces)
    return start + "\U0001f600" * (max_length - len(start))


TITLE = filled(bounds.JOB_TITLE_MAX, FAMILY, ACCENTED, "مهندس ")
COMPANY = filled(bounds.JOB_COMPANY_MAX, "株式会社テスト ")
FILENAME = filled(bounds.ATTACHMENT_FILENAME_MAX, "السيرة الذاتية ", FAMILY)
CV_TEXT = "山田太郎\nخبرة في بايثون\n" + FAMILY + " Python, gRPC " + ACCENTED + "quipe"


@pytest.fixture
def services(db_url: str, clock: ManualClock) -> Iterator[Services]:
    with running_services(db_url, clock, Limits(per_user=2, global_=3)) as running:
        yield running


def test_text_in_any_script_at_its_limit_is_kept_as_sent(services: Services) -> None:
    entitle(services.db, "aiko")

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            aiko = bearer("aiko")
            job = {"title": TITLE, "company": COMPANY, "description": CV_TEXT}
            created = await client.post("/api/jobs", json=job, headers=aiko)
            assert created.status_code == 201, created.text
            read = (await client.get(f"/api/jobs/{created.json()['id']}", headers=aiko)).json()
            assert {key: read[key] for key in job} == job
            # One character more is one too many, whatever its size in bytes.
            over = await client.post("/api/jobs", json={**job, "title": TITLE + "a"}, headers=aiko)
            assert over.status_code == 400
            assert over.json()["field"] == "title"

            cv = {"kind": "cv", "filename": FILENAME, "text": CV_TEXT}
            added = await client.post("/api/attachments", json=cv, headers=aiko)
            assert added.status_code == 201, added.text
            assert added.json()["filename"] == FILENAME
            assert added.json()["text_length"] == len(CV_TEXT)  # what the page counts
            listed = (await client.get("/api/attachments", headers=aiko)).json()["items"]
            assert [item["filename"] for item in listed] == [FILENAME]

            start = await client.post(
                f"/api/jobs/{created.json()['id']}/strategy-snapshot",
                json={"attachment_id": added.json()["id"]},
                headers={**aiko, "Idempotency-Key": "intl-1"},
            )
            assert start.status_code == 202, start.text
            claimed = claim(services, ["strategy.snapshot"])
            answer = {
                "fit_score": 70,
                "summary": "تطابق جيد " + FAMILY + " 日本語 " + ACCENTED,
                "strengths": ["\U0001d4dc\U0001d4ea\U0001d4fd\U0001d4f1 " + COMPANY[:7]],
                "gaps": [],
                "next_steps": [],
            }
            publish(services, claimed, answer)
            complete(services, claimed)
            path = f"/api/jobs/{created.json()['id']}/strategy-snapshot"
            snapshot = (await client.get(path, headers=aiko)).json()["snapshot"]
            assert snapshot["result"] == answer
            assert snapshot["context"]["name"] == FILENAME  # the name the result was made with

    run(scenario())


def test_a_refusal_spells_the_controls_of_a_name_it_echoes(services: Services) -> None:
    """A name a client made up comes back in the refusal's detail: a right-to-left override
    in it would show the rest of the message backwards, a line feed break the line."""

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            aiko = bearer("aiko")
            query = await client.get("/api/jobs", params={"cv\u202etxt.exe": "1"}, headers=aiko)
            assert query.status_code == 400
            assert query.json()["field"] == "cv\\u202etxt.exe"
            assert query.json()["detail"] == (
                "cv\\u202etxt.exe is not a query parameter of this route."
            )
            body = {"title": "T", "description": "D", "ti\ntle\u2066": 1}
            member = await client.post("/api/jobs", json=body, headers=aiko)
            assert member.status_code == 400
            assert member.json()["detail"] == "ti\\u000atle\\u2066 is not a field of this request."
            # Any other script comes back as it was sent.
            named = await client.get("/api/jobs", params={"名前": "1"}, headers=aiko)
            assert named.json()["field"] == "名前"

    run(scenario())
