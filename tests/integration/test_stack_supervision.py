"""A child that keeps dying is restarted with backoff, then everything stops with a reason."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path

from durable_ops.stack.children import Stack
from durable_ops.stack.output import Output
from durable_ops.stack.restarts import RestartBudget
from durable_ops.up import EXIT_UNAVAILABLE, EXIT_USAGE, _supervise
from tests.support.keys import key_env
from tests.support.ports import free_port


def test_a_child_that_keeps_dying_spends_its_budget_and_stops_the_stack(tmp_path: Path) -> None:
    # A service refuses an unmigrated database at once (exit 3): a crash on every start.
    env = {
        "OPS_DATABASE_URL": f"sqlite:///{tmp_path / 'empty.sqlite3'}",
        "OPS_LOG_JSON": "true",
        **key_env(),  # else the child reads the keys in ./var, the checkout's
        # Not the default port, which another test process's stack may hold (exit 1).
        "OPS_WORKSPACE_BIND": f"127.0.0.1:{free_port()}",
    }
    out = io.StringIO()
    stack = Stack(env, specs=[], out=out, as_json=True)
    stack.start_one("workspace")
    budget = RestartBudget(limit=2, first_delay=0.05)
    try:
        code = _supervise(stack, threading.Event(), Output(out, as_json=True), budget)
    finally:
        stack.stop()
    assert code == EXIT_UNAVAILABLE
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    ours = [record for record in records if record["process"] == "up"]
    assert [record["event"] for record in ours] == ["restarting", "restarting", "gave_up"]
    assert ours[0]["message"] == (
        "workspace exited with code 3; restarting in 0.1 s (restart 1 of 2)."
    )
    assert ours[1]["delay_seconds"] == 0.1
    assert ours[2]["message"] == (
        "opsctl up: workspace exited with code 3 after 2 restarts within 300 s;"
        " stopping everything."
    )
    # Each start really ran: the child said why it refused, three times (the relay of the
    # last one's output may still be on its way).
    deadline = time.monotonic() + 10
    while _refusals(out) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _refusals(out) == 3


def test_a_child_that_refuses_a_setting_stops_the_stack_at_once(tmp_path: Path) -> None:
    """Exit 2 is a setting the child refuses: the same at every restart, so none is tried."""
    env = {
        "OPS_DATABASE_URL": f"sqlite:///{tmp_path / 'empty.sqlite3'}",
        "OPS_LOG_JSON": "true",
        "OPS_LOG_LEVEL": "loud",
        **key_env(),
    }
    out = io.StringIO()
    stack = Stack(env, specs=[], out=out, as_json=True)
    stack.start_one("workspace")
    try:
        code = _supervise(stack, threading.Event(), Output(out, as_json=True), RestartBudget())
    finally:
        stack.stop()
    assert code == EXIT_USAGE
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [record["event"] for record in records if record["process"] == "up"] == ["refused"]
    deadline = time.monotonic() + 10  # the relay of the child's own line may be on its way
    while "OPS_LOG_LEVEL must be" not in out.getvalue() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "OPS_LOG_LEVEL must be" in out.getvalue()


def _refusals(out: io.StringIO) -> int:
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    return sum(r["process"] == "workspace" and "opsctl migrate" in str(r) for r in records)
