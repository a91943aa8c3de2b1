"""``opsctl operations|tasks|console`` as an operator meets it, against the real services.

What the command line can know is wrong is refused there, with exit 2 and one line,
before any call reaches the service (its log says so: no ``operator_*`` line).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from durable_ops import cli
from durable_ops.model.scope import Role
from durable_ops.operator_cli import EXIT_NOT_CONFIRMED
from tests.support.clock import ManualClock
from tests.support.grpc_services import Services
from tests.support.keys import key_env
from tests.support.operations_client import (
    ALICE,
    BOB,
    FAILED,
    OTHER_TASK,
    QUEUED,
    SUCCEEDED,
    TASK,
    WAITING_FOR_RETRY,
    OpsClient,
)
from tests.support.opsctl import Logs, Opsctl, in_process_opsctl
from tests.support.ports import refusing_port
from tests.support.workspace_client import create_job

OPERATOR_NAME = "ops-erin"


@pytest.fixture
def opsctl(
    services: Services, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Opsctl:
    return in_process_opsctl(services, monkeypatch, capsys)


def _called(logs: Logs) -> list[str]:
    return [str(line["event"]) for line in logs if str(line["event"]).startswith("operator_")]


@pytest.mark.parametrize(
    "args",
    [
        ("operations", "prune", "--older-than", "1s", "--batch-size", "0"),
        ("operations", "prune", "--older-than", "1s", "--batch-size", "99999"),
        ("operations", "prune", "--older-than", "30d", "--tombstones-older-than", "1d"),
        ("tasks", "pause", "BAD TYPE!"),
        ("operations", "list", "--owner", ""),
        ("operations", "list", "--limit", "0"),
        ("operations", "cancel", "--task", "", "--state", "queued", "--yes"),
        ("operations", "list", "--as", ""),
        ("console", "link", "--as", ""),
        ("console", "revoke", "--operator", ""),
    ],
    ids=" ".join,
)
def test_a_value_the_cli_knows_is_wrong_is_refused_in_one_line_before_any_call(
    opsctl: Opsctl, args: tuple[str, ...]
) -> None:
    code, out, err, logs = opsctl(*args)
    assert (code, out) == (2, "")
    assert len(err.splitlines()) == 1, err
    assert _called(logs) == []


@pytest.mark.parametrize("args", [("--older-than", "-5m"), ("--older-than=-5m",)])
def test_a_negative_age_is_named_as_such(opsctl: Opsctl, args: tuple[str, ...]) -> None:
    code, _, err, logs = opsctl("operations", "list", *args)
    assert code == 2
    assert "'-5m' is negative" in err
    assert _called(logs) == []


def test_a_wrong_value_is_named_before_the_key_is_looked_for(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Without a key the first sentence would be "no service key": the value comes first."""
    monkeypatch.setenv("OPS_SERVICE_KEYS_DIR", str(tmp_path))
    monkeypatch.delenv("OPS_SERVICE_KEY", raising=False)
    code = cli.main(["operations", "prune", "--older-than", "1d", "--batch-size", "0"])
    assert code == 2
    assert capsys.readouterr().err == (
        "opsctl operations prune: --batch-size: must be between 1 and 5000\n"
    )


# ---- bulk cancel and retry ---------------------------------------------------------------------


def test_a_bulk_plan_asked_for_as_json_is_json(ops: OpsClient, opsctl: Opsctl) -> None:
    queued = [ops.create(BOB, f"k-plan-{n}") for n in range(2)]
    code, out, err, _ = opsctl("operations", "cancel", "--owner", BOB, "--json")
    assert code == EXIT_NOT_CONFIRMED
    plan = json.loads(out)
    assert (plan["would"], plan["filter"]) == ("cancel", f"owner={BOB}")
    assert sorted(row["id"] for row in plan["operations"]) == sorted(op.id for op in queued)
    assert "--yes" in err
    assert {ops.get(BOB, op.id).state for op in queued} == {QUEUED}


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("retry", "--state", "failed"), "no operation matches state=failed; nothing to retry"),
        (
            ("cancel", "--task", "nosuch.x", "--yes"),
            "no operation matches task=nosuch.x; nothing to cancel",
        ),
    ],
)
def test_a_filter_that_matches_nothing_says_so_and_is_done(
    ops: OpsClient, opsctl: Opsctl, args: tuple[str, ...], said: str
) -> None:
    ops.create(ALICE, "k-unmatched")
    assert opsctl("operations", *args)[:3] == (0, f"{said}\n", "")
    assert opsctl("operations", *args, "--json")[:3] == (0, "[]\n", "")


def test_a_bulk_action_by_filter_leaves_out_what_it_cannot_act_on(
    services: Services, ops: OpsClient, opsctl: Opsctl
) -> None:
    """``cancel --task T --yes`` in an incident listed T's finished operations too, had each
    refused ``already_terminal`` and exited 5: the operator read the bulk cancel as failed.
    (``retry`` likewise took running ones.) The plan now names only what the action can
    change and says how many matches it leaves out and why."""
    done = ops.create(BOB, "k-bulk-done")
    ops.complete(ops.claim_one())
    queued = ops.create(BOB, "k-bulk-queued", subject_id=create_job(services.workspace, BOB))

    code, out, err, _ = opsctl("operations", "cancel", "--owner", BOB)
    assert code == EXIT_NOT_CONFIRMED
    assert out.splitlines() == [
        f"would cancel 1 operations (owner={BOB}); left out 1 already finished:",
        f"  {queued.id}  {BOB}  queued",
    ]
    plan = json.loads(opsctl("operations", "cancel", "--owner", BOB, "--json")[1])
    assert ([row["id"] for row in plan["operations"]], plan["left_out"]) == ([queued.id], 1)
    code, out, err, _ = opsctl("operations", "cancel", "--owner", BOB, "--yes")
    assert (code, out) == (0, f"{queued.id}  {BOB}  cancelled\n")
    assert err == f"opsctl operations cancel: left out 1 already finished (owner={BOB})\n"

    # Now both have finished: nothing a cancel can change, and a retry only the cancelled.
    assert opsctl("operations", "cancel", "--owner", BOB, "--yes")[:3] == (
        0,
        f"no operation matching owner={BOB} can be cancelled (2 already finished);"
        " nothing to cancel\n",
        "",
    )
    code, out, err, _ = opsctl("operations", "retry", "--owner", BOB, "--yes")
    assert (code, out) == (0, f"{queued.id}  {BOB}  queued\n")
    assert err == (
        f"opsctl operations retry: left out 1 neither failed nor cancelled (owner={BOB})\n"
    )
    assert ops.get(BOB, done.id).state == SUCCEEDED


def test_a_bulk_cancel_by_filter_takes_every_unfinished_state_and_a_retry_only_the_finished(
    ops: OpsClient, opsctl: Opsctl
) -> None:
    """A cancel by filter plans every operation not finished yet: queued, waiting to retry
    and running (its worker is asked to stop). A retry by filter plans only the failed and
    the cancelled, leaving out (and counting) what has not finished."""
    running = ops.create(BOB, "k-states-running")
    ops.claim_one()
    retrying = ops.create(BOB, "k-states-retrying", max_attempts=2)
    assert ops.fail(ops.claim_one(), retryable=True) == WAITING_FOR_RETRY
    failed = ops.create(BOB, "k-states-failed")
    assert ops.fail(ops.claim_one(), retryable=False) == FAILED
    queued = ops.create(BOB, "k-states-queued")

    code, out, _, _ = opsctl("operations", "cancel", "--owner", BOB, "--json")
    assert code == EXIT_NOT_CONFIRMED
    plan = json.loads(out)
    planned = {row["id"]: row["state"] for row in plan["operations"]}
    assert planned == {
        running.id: "running",
        retrying.id: "waiting_for_retry",
        queued.id: "queued",
    }
    assert plan["left_out"] == 1  # the failed one

    code, out, _, _ = opsctl("operations", "retry", "--owner", BOB, "--json")
    assert code == EXIT_NOT_CONFIRMED
    plan = json.loads(out)
    assert ([row["id"] for row in plan["operations"]], plan["left_out"]) == ([failed.id], 3)


# ---- what a cancel and a show say --------------------------------------------------------------


def test_a_refusal_is_named_by_the_code_the_service_logs_not_its_grpc_status(
    ops: OpsClient, opsctl: Opsctl
) -> None:
    """``not_retryable``, as the service's log and the owner's API say it; gRPC's
    ``failed_precondition`` is shared by several refusals and named none."""
    done = ops.create(BOB, "k-done-then-retried")
    ops.complete(ops.claim_one())
    refusals = [
        (("retry", done.id), f"opsctl operations retry: {done.id}: not_retryable: "),
        (("cancel", done.id), f"opsctl operations cancel: {done.id}: already_terminal: "),
        (("show", "0" * 32), "opsctl operations show: operation_not_found: "),
    ]
    for args, said in refusals:
        code, out, err, logs = opsctl("operations", *args)
        assert (code, out) == (5, "")
        [logged] = [line["code"] for line in logs if line["event"] == "operator_refused"]
        assert err.startswith(said), err
        assert f": {logged}: " in err
        assert len(err.splitlines()) == 1, err


def test_cancelling_a_running_operation_says_the_cancel_was_requested(
    ops: OpsClient, opsctl: Opsctl
) -> None:
    created = ops.create(BOB, "k-cancel-running")
    ops.claim_one()
    code, out, _, _ = opsctl("operations", "cancel", created.id)
    assert (code, out) == (0, f"{created.id}  {BOB}  running, cancel requested\n")


def test_show_labels_a_failure_an_attempt_left_on_a_succeeded_operation_as_the_last(
    services: Services, ops: OpsClient, clock: ManualClock, opsctl: Opsctl
) -> None:
    created = ops.create(BOB, "k-expired-then-done", retry_delay_seconds=1)
    ops.claim_one(lease_seconds=5)
    clock.advance(5.1)
    assert services.sweep().expired_leases == 1
    clock.advance(2)  # past the jittered retry delay
    assert services.sweep().promoted == 1
    ops.complete(ops.claim_one())

    code, out, _, _ = opsctl("operations", "show", created.id)
    assert code == 0
    fields = dict(line.split(maxsplit=1) for line in out.splitlines() if not line.startswith(" "))
    assert (fields["state"], fields["last_failure_code"]) == ("succeeded", "lease_expired")
    assert "failure_code" not in fields
    shown = json.loads(opsctl("operations", "show", created.id, "--json")[1])
    assert [attempt["outcome"] for attempt in shown["attempts"]] == ["expired", "succeeded"]

    failed = ops.create(BOB, "k-failed", max_attempts=1)
    ops.fail(ops.claim_one(), retryable=False, code="model_error", message="no")
    out = opsctl("operations", "show", failed.id)[1]
    assert "\nfailure_code      model_error\n" in out


# ---- queues and the failure-code filter ---------------------------------------------------------


def test_queues_show_each_task_types_depth_and_oldest_queued_wait(
    ops: OpsClient, clock: ManualClock, opsctl: Opsctl
) -> None:
    assert opsctl("operations", "queues")[:2] == (0, "no unfinished operations\n")
    ops.create(ALICE, "k-queued-long")
    clock.advance(3700)
    ops.create(BOB, "k-queued-now")
    ops.create(BOB, "k-running", task_type=OTHER_TASK, subject_type="attachment")
    ops.claim_one((OTHER_TASK,))

    code, out, _, logs = opsctl("operations", "queues", "--as", OPERATOR_NAME)
    assert code == 0
    assert [line.split() for line in out.splitlines()] == [
        ["TASK", "QUEUED", "RUNNING", "RETRY", "FALLBACK", "OLDEST", "QUEUED"],
        [OTHER_TASK, "0", "1", "0", "0", "-"],
        [TASK, "2", "0", "0", "0", "1h", "1m"],
    ]
    assert [line["operator"] for line in logs if line["event"] == "operator_queues"] == [
        OPERATOR_NAME
    ]
    depths = json.loads(opsctl("operations", "queues", "--json")[1])
    by_type = {row["task_type"]: row for row in depths["queues"]}
    assert by_type[TASK]["oldest_queued_seconds"] == 3700
    assert by_type[OTHER_TASK]["oldest_queued_seconds"] is None


def test_queues_say_which_task_types_are_paused(ops: OpsClient, opsctl: Opsctl) -> None:
    """In an incident ``queues`` showed a paused type's queued work as any other queue's,
    waiting longer and longer: stuck, or paused? The console says so; the terminal did not."""
    ops.create(ALICE, "k-queued-paused")
    ops.create(BOB, "k-queued-active", task_type=OTHER_TASK, subject_type="attachment")
    for paused in (TASK, "report.render"):  # the second with no unfinished work
        assert opsctl("tasks", "pause", paused)[0] == 0

    code, out, _, _ = opsctl("operations", "queues")
    assert code == 0
    assert [line.split() for line in out.splitlines()] == [
        ["TASK", "QUEUED", "RUNNING", "RETRY", "FALLBACK", "OLDEST", "QUEUED"],
        [OTHER_TASK, "1", "0", "0", "0", "0s"],
        [f"{TASK}", "(paused)", "1", "0", "0", "0", "0s"],
        ["paused:", "report.render,", f"{TASK}", "(opsctl", "tasks", "resume", "TYPE)"],
    ]
    depths = json.loads(opsctl("operations", "queues", "--json")[1])
    assert {row["task_type"]: row["paused"] for row in depths["queues"]} == {
        OTHER_TASK: False,
        TASK: True,
    }
    assert depths["paused_task_types"] == ["report.render", TASK]


def test_list_and_retry_by_failure_code(services: Services, ops: OpsClient, opsctl: Opsctl) -> None:
    job = create_job(services.workspace, BOB)  # a real one: the operator retries an analysis
    failed = ops.create(BOB, "k-model-error", max_attempts=1, subject_id=job)
    ops.fail(ops.claim_one(), retryable=False, code="model_error", message="the model said no")
    ops.create(BOB, "k-still-queued")

    code, out, _, _ = opsctl("operations", "list", "--failure-code", "model_error", "--json")
    assert code == 0
    assert [row["id"] for row in json.loads(out)] == [failed.id]
    code, out, _, _ = opsctl("operations", "retry", "--failure-code", "model_error", "--yes")
    assert (code, out) == (0, f"{failed.id}  {BOB}  queued\n")
    assert opsctl("operations", "list", "--failure-code", "")[0] == 2


# ---- what the command line says before and around its calls ------------------------------------


def test_ids_and_a_filter_together_are_refused_and_nothing_is_cancelled(
    ops: OpsClient, opsctl: Opsctl
) -> None:
    """``cancel ID --owner U`` would act on ID alone, the filter silently dropped: refused."""
    named = ops.create(BOB, "k-id-and-filter")
    code, out, err, logs = opsctl("operations", "cancel", named.id, "--owner", BOB)
    assert (code, out) == (2, "")
    assert err == "opsctl operations cancel: name operation ids or a filter, not both\n"
    assert _called(logs) == []
    assert ops.get(BOB, named.id).state == QUEUED


def test_an_id_named_twice_is_acted_on_once(
    services: Services, ops: OpsClient, opsctl: Opsctl
) -> None:
    """A second retry of the same id would be refused (``not_retryable``) and exit 5."""
    job = create_job(services.workspace, BOB)
    failed = ops.create(BOB, "k-retried-twice", max_attempts=1, subject_id=job)
    ops.fail(ops.claim_one(), retryable=False, message="the model refused")
    code, out, err, _ = opsctl("operations", "retry", failed.id, failed.id)
    assert (code, out, err) == (0, f"{failed.id}  {BOB}  queued\n", ""), err


def test_list_stops_at_its_limit(ops: OpsClient, opsctl: Opsctl) -> None:
    created = {ops.create(BOB, f"k-limited-{n}").id for n in range(3)}
    code, out, _, _ = opsctl("operations", "list", "--owner", BOB, "--limit", "2", "--json")
    assert code == 0
    listed = [row["id"] for row in json.loads(out)]
    assert len(listed) == 2
    assert set(listed) < created


def test_ids_with_nothing_answering_are_one_sentence_and_exit_2_not_a_refusal_each(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The first id's ``unavailable`` is asked about once: nothing answers (exit 2), not
    "refused" per id (exit 5), which would send the operator to the service's log."""
    for name, value in key_env(Role.OPERATOR).items():
        monkeypatch.setenv(name, value)
    address = f"127.0.0.1:{refusing_port()}"
    code = cli.main(["operations", "cancel", "a" * 32, "b" * 32, "--target", address])
    assert code == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"opsctl operations cancel: nothing answers at {address} (--target)")


def test_tasks_list_json_gives_an_active_type_null_pause_fields(opsctl: Opsctl) -> None:
    """As every other field of this JSON that is not set: null, not an empty string."""
    assert opsctl("tasks", "pause", OTHER_TASK, "--as", OPERATOR_NAME)[0] == 0
    code, out, _, _ = opsctl("tasks", "list", "--json")
    assert code == 0
    rows = {row["task_type"]: row for row in json.loads(out)}
    assert {key: rows[TASK][key] for key in ("state", "paused", "paused_by", "paused_at")} == {
        "state": "active",
        "paused": False,
        "paused_by": None,
        "paused_at": None,
    }
    assert rows[OTHER_TASK]["paused_by"] == OPERATOR_NAME
