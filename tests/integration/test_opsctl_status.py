"""``opsctl status``: one command that says whether the install is healthy and, if not,
what is wrong (``model.health`` judges; ``cli.cmd_status`` reads).

Run in this process against real services (every gRPC service on one server, as the
other integration tests run them), a live gateway over them, and the test's database,
on both engines; then with a service stopped, one that hangs, the database away, and
the whole product down. Also: an operator command whose service answers that its
database is away exits 4, as a command that opens the database itself does (ADR 66).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import httpx
import pytest
from structlog.testing import capture_logs

from durable_ops import cli, status_cli
from durable_ops.cli import EXIT_DATABASE_UNAVAILABLE, EXIT_DEGRADED, EXIT_UNHEALTHY
from durable_ops.model import health
from durable_ops.model.health import LEASE_OVERDUE_SECONDS, Health
from durable_ops.model.scope import Role
from durable_ops.status_cli import STATUS_GATEWAY_SECONDS
from durable_ops.storage import capacity
from tests.support.clock import ManualClock
from tests.support.gateway import LiveGateway, make_app
from tests.support.grpc_services import Services, running_services
from tests.support.keys import key_env
from tests.support.operations_client import ALICE, LEASE_SECONDS, OTHER_TASK, TASK, OpsClient
from tests.support.opsctl import in_process_opsctl
from tests.support.ports import refusing_port, unanswered_port

Status = Callable[..., tuple[int, str, str]]
SERVICES = ("operations", "operator", "notifications", "workspace", "ai-admission")
TARGETS = (
    "OPS_OPERATIONS_TARGET",
    "OPS_NOTIFICATIONS_TARGET",
    "OPS_WORKSPACE_TARGET",
    "OPS_AI_ADMISSION_TARGET",
)


def _lines(out: str) -> dict[str, tuple[str, str]]:
    """Each check's line: name -> (health, reason); the verdict line left out."""
    found = {}
    for line in out.splitlines()[:-1]:
        health, rest = line.split(maxsplit=1)
        if rest.startswith("queue "):  # "queue TYPE  reason": the name has a space
            kind, task_type, reason = rest.split(maxsplit=2)
            found[f"{kind} {task_type}"] = (health, reason)
        else:
            name, reason = rest.split(maxsplit=1)
            found[name] = (health, reason)
    return found


@pytest.fixture
def status(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> Status:
    """``opsctl status ARGS…`` with the operator's key, in a directory with no running stack."""
    monkeypatch.chdir(tmp_path)  # no var/stack.json of a stack running in the checkout
    for name, value in key_env(Role.OPERATOR).items():
        monkeypatch.setenv(name, value)

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        with capture_logs():  # the services' log lines, in this process too
            code = cli.main(["status", *args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def gateway(services: Services) -> Iterator[str]:
    """A gateway over ``services``, as `opsctl up` runs one: its URL."""
    with LiveGateway(make_app(services.target)) as live:
        yield live.url


@pytest.fixture
def at_services(services: Services, monkeypatch: pytest.MonkeyPatch, db_url: str) -> str:
    """Every target and the database are the test's: the database URL."""
    for variable in TARGETS:
        monkeypatch.setenv(variable, services.target)
    monkeypatch.setenv("OPS_DATABASE_URL", db_url)
    return db_url


def test_a_healthy_install_is_all_ok(
    at_services: str, gateway: str, status: Status, engine_name: str
) -> None:
    code, out, err = status("--gateway-url", gateway)
    assert (code, err) == (0, "")
    lines = _lines(out)
    assert list(lines) == [
        "database",
        *SERVICES,
        "gateway",
        "ai-switch",
        "task-types",
        "queues",
        "workers",
    ]
    assert {health for health, _ in lines.values()} == {"ok"}, out
    engine = {"sqlite": "SQLite", "mariadb": "MariaDB"}[engine_name]
    assert lines["database"][1].startswith(engine)
    assert "schema at head" in lines["database"][1]
    assert lines["gateway"][1] == f"ready at {gateway}/readyz"
    assert out.splitlines()[-1] == f"all {len(lines)} checks ok"


def test_the_gateway_is_found_from_its_variable_as_under_compose(
    at_services: str, gateway: str, status: Status, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In Compose's opsctl container the gateway is another container, neither the
    running opsctl up's nor its own bind: compose.yaml names it in OPS_GATEWAY_URL."""
    monkeypatch.setenv("OPS_GATEWAY_URL", gateway)
    code, out, err = status()
    assert (code, err) == (0, "")
    assert _lines(out)["gateway"] == ("ok", f"ready at {gateway}/readyz")

    monkeypatch.setenv("OPS_GATEWAY_URL", "gateway:8080")
    code, out, err = status()
    assert (code, out) == (2, "")
    assert err == "opsctl status: OPS_GATEWAY_URL 'gateway:8080' is not an http(s) address\n"


def test_json_gives_each_check_its_status_reason_and_details(
    at_services: str, gateway: str, status: Status, engine_name: str
) -> None:
    code, out, _ = status("--gateway-url", gateway, "--json")
    assert code == 0
    found = json.loads(out)
    assert found["status"] == "ok"
    assert [check["name"] for check in found["checks"]][:7] == ["database", *SERVICES, "gateway"]
    for check in found["checks"]:
        assert set(check) == {"name", "status", "reason", "details"}
        assert check["status"] == "ok"
    by_name = {check["name"]: check for check in found["checks"]}
    assert by_name["database"]["details"]["revision"] == by_name["database"]["details"]["head"]
    assert by_name["workspace"]["details"]["state"] == "serving"
    assert by_name["gateway"]["details"]["status_code"] == 200
    assert by_name["ai-switch"]["details"] == {"ai_enabled": True}


def test_a_stopped_service_and_one_that_hangs_are_down(
    services: Services,
    at_services: str,
    gateway: str,
    status: Status,
    clock: ManualClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with running_services(at_services, clock) as workspace:
        stopped = workspace.target
    hanging = f"127.0.0.1:{unanswered_port()}"
    monkeypatch.setenv("OPS_WORKSPACE_TARGET", stopped)
    monkeypatch.setenv("OPS_NOTIFICATIONS_TARGET", hanging)

    code, out, err = status("--gateway-url", gateway)
    assert (code, err) == (EXIT_UNHEALTHY, "")
    lines = _lines(out)
    assert lines["workspace"] == (
        "down",
        f"nothing answers at {stopped} (OPS_WORKSPACE_TARGET): not running, or not at that address",
    )
    assert lines["notifications"][0] == "down"
    # The Operator service is the Operations process's, wherever the others are.
    assert lines["operator"] == ("ok", f"serving at {services.target}")
    assert {name for name, (health, _) in lines.items() if health != "ok"} == {
        "workspace",
        "notifications",
    }
    assert out.splitlines()[-1] == "down: notifications, workspace"


def _away(engine_name: str, tmp_path: Path) -> str:
    """A database URL of the engine that cannot be reached: a SQLite "file" that is a
    folder; a MariaDB port where connections are refused."""
    if engine_name == "sqlite":
        folder = tmp_path / "a-folder"
        folder.mkdir()
        return f"sqlite:///{folder}"
    return f"mysql+pymysql://root@127.0.0.1:{refusing_port()}/ops"


@pytest.mark.parametrize("engine_name", ["sqlite", "mariadb"])
def test_the_database_away_and_the_product_down_are_said_plainly(
    engine_name: str, status: Status, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With nothing running: a line each, no traceback, the unhealthy exit code."""
    url = _away(engine_name, tmp_path)
    nowhere = f"127.0.0.1:{refusing_port()}"
    for variable in TARGETS:
        monkeypatch.setenv(variable, nowhere)
    code, out, err = status("--database-url", url, "--gateway-url", f"http://{nowhere}/")
    assert (code, err) == (EXIT_UNHEALTHY, "")
    assert "Traceback" not in out
    lines = _lines(out)
    health, said = lines["database"]
    assert health == "down"
    assert said.startswith("the database ")
    assert " (from --database-url) did not answer: " in said
    assert all(lines[name][0] == "down" for name in (*SERVICES, "gateway")), out
    assert lines["ai-switch"] == ("unknown", "the database could not be read: see its line")
    assert lines["queues"] == (
        "unknown",
        f"the Operations service at {nowhere} did not answer (see its line)",
    )


def test_a_sqlite_file_that_is_not_there_is_said_and_not_made(
    status: Status, tmp_path: Path
) -> None:
    missing = tmp_path / "nothing.sqlite3"
    code, out, _ = status("--database-url", f"sqlite:///{missing}", "--json")
    assert code == EXIT_UNHEALTHY
    [database] = [check for check in json.loads(out)["checks"] if check["name"] == "database"]
    assert database["status"] == "down"
    assert database["reason"].endswith("does not exist: `opsctl migrate` (or `opsctl up`) makes it")
    assert not missing.exists()


def test_a_gateway_url_that_is_no_http_address_is_a_usage_error_naming_its_flag(
    status: Status, tmp_path: Path
) -> None:
    """It said ``--url``, console link's flag, which ``opsctl status`` does not have."""
    missing = tmp_path / "nothing.sqlite3"
    code, out, err = status("--database-url", f"sqlite:///{missing}", "--gateway-url", "ftp://x")
    assert (code, out) == (2, "")
    assert err == "opsctl status: --gateway-url 'ftp://x' is not an http(s) address\n"


def test_leases_past_their_time_say_the_sweeper_is_behind_until_it_sweeps(
    at_services: str, gateway: str, status: Status, services: Services, clock: ManualClock
) -> None:
    ops = OpsClient(services)
    ops.create(ALICE, "k-running")
    ops.create(ALICE, "k-live", subject_id="job-2")
    ops.claim_one()
    clock.advance(LEASE_SECONDS + LEASE_OVERDUE_SECONDS + 1)
    ops.claim_one()  # its lease is live
    code, out, _ = status("--gateway-url", gateway)
    assert code == EXIT_DEGRADED
    health, said = _lines(out)["workers"]
    assert health == "degraded"
    assert said.startswith(
        "1 running under a live lease; 1 running past its lease, the longest by 31s:"
        " the sweeper is not keeping up"
    )
    assert _lines(out)[f"queue {TASK}"] == ("ok", "2 running")

    services.sweep()  # the expired lease's attempt ends: it waits to retry
    code, out, _ = status("--gateway-url", gateway)
    assert code == 0, out
    assert _lines(out)["workers"] == ("ok", "1 running under a live lease")
    assert _lines(out)[f"queue {TASK}"] == ("ok", "1 running, 1 waiting to retry")


def test_a_paused_type_ai_off_and_work_waiting_with_none_running_are_degraded(
    at_services: str,
    gateway: str,
    status: Status,
    services: Services,
    clock: ManualClock,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ops = OpsClient(services)
    ops.create(ALICE, "k-waits", task_type=OTHER_TASK, subject_type="attachment")
    clock.advance(120)
    opsctl = in_process_opsctl(services, monkeypatch, capsys)
    assert opsctl("tasks", "pause", TASK)[0] == 0
    services.db.run(lambda tx: capacity.set_ai_enabled(tx, False, clock()), owner_id=None)

    code, out, _ = status("--gateway-url", gateway, "--max-wait", "90s")
    assert code == EXIT_DEGRADED
    lines = _lines(out)
    assert lines["ai-switch"][0] == "degraded"
    assert lines["task-types"][0] == "degraded"
    assert lines["task-types"][1].startswith(f"paused: {TASK} (by ")
    assert lines[f"queue {OTHER_TASK}"] == (
        "degraded",
        "1 queued (the oldest due for 2m 0s); waiting longer than 1m 30s",
    )
    assert lines["workers"][0] == "degraded"
    assert f"nothing of {OTHER_TASK} runs while its queued work waits" in lines["workers"][1]
    assert out.splitlines()[-1] == f"degraded: ai-switch, task-types, queue {OTHER_TASK}, workers"

    # Within the default wait, the queue and the workers are fine.
    _, out, _ = status("--gateway-url", gateway)
    assert _lines(out)[f"queue {OTHER_TASK}"][0] == "ok"
    assert _lines(out)["workers"] == ("ok", "0 running under a live lease")


def test_an_operator_command_whose_service_lost_its_database_exits_4(
    clock: ManualClock,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    status: Status,
) -> None:
    """The service answers UNAVAILABLE database_unavailable: "try again later", which exit 5
    ("the service refused") did not say (ADR 66)."""
    away = f"mysql+pymysql://root@127.0.0.1:{refusing_port()}/ops"
    with running_services(away, clock) as lost:
        opsctl = in_process_opsctl(lost, monkeypatch, capsys)
        code, out, err, _ = opsctl("operations", "queues")
        assert (code, out) == (EXIT_DATABASE_UNAVAILABLE, "")
        assert err.startswith("opsctl operations queues: database_unavailable: ")
        assert len(err.splitlines()) == 1
        assert opsctl("tasks", "list")[0] == EXIT_DATABASE_UNAVAILABLE

        code, out, _ = status("--database-url", away)
        assert code == EXIT_UNHEALTHY
        assert _lines(out)["queues"] == (
            "unknown",
            f"the Operations service at {lost.target} answered that its database is away"
            " (database_unavailable)",
        )


# ---- how what was read, or not, is worded ------------------------------------------------------


def test_a_schema_behind_says_the_ai_switch_is_unread_not_off() -> None:
    """Behind this release the switch's table may not say it: not "off" (degraded), which
    would send the operator to `opsctl ai enable`."""
    reading = object()  # what the database's line judges; not this one's concern
    found, switch = status_cli._database_findings(
        "sqlite:///x (from --database-url)", (reading, None)
    )
    assert found is reading
    check = health.ai_switch(switch)
    assert (check.health, check.reason) == (
        Health.UNKNOWN,
        "the schema is behind this release: see the database's line",
    )


def test_a_gateway_that_times_out_reads_as_no_answer_within_its_seconds() -> None:
    """httpx's own timeout, as a reader still waiting: "no answer within 3.5 s"."""
    timed_out = httpx.ReadTimeout("timed out")
    assert status_cli._unread(timed_out, STATUS_GATEWAY_SECONDS).why == "no answer within 3.5 s"


def test_a_reader_still_reading_at_the_deadline_is_a_timeout() -> None:
    release = threading.Event()
    try:
        found = status_cli._read_at_once(
            {"hangs": lambda: release.wait(), "answers": lambda: "ok"}, 0.0
        )
    finally:
        release.set()
    assert isinstance(found["hangs"], TimeoutError)
    assert status_cli._unread(found["hangs"]).why == "no answer within 4 s"


@pytest.mark.parametrize("body", [b'{"backends": ["operations"]}', b"[]", b"not json"])
def test_an_answer_not_shaped_as_the_gateways_is_judged_by_its_status_code(body: bytes) -> None:
    """Something else at the gateway's address: its status code is read, never a traceback
    (which would be said as the gateway's line in Python's words)."""

    class Answer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        found = status_cli._readyz(f"http://127.0.0.1:{server.server_port}/readyz")
    finally:
        server.shutdown()
        server.server_close()
    assert found == health.GatewayAnswer(200, {})
