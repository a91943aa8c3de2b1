"""``OPS_WORKER_CONCURRENCY=0``: the AI worker runs as many inferences as the local model
server has slots, read at start-up (ADR 0044, ``model.concurrency``).

Against the real llama-server (``scripts/real-model.sh build``; skipped without it
unless ``OPS_REQUIRE_REAL_MODEL=1``) started with ``--parallel 3``: its ``/props``
says 3 and a worker started with 0 runs 3 at once. Against a server that does not
say (the development model, which has no ``/props``) and one that refuses
connections, the reading is None and the worker runs one at a time.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from durable_ops.ai_worker.server_slots import read_server_slots, server_root
from tests.support.ai_stack import (
    LlamaServer,
    ModelServer,
    ai_stack,
    closed_port_url,
    find_real_model,
)

SLOTS = 3


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    model = find_real_model()
    if model is None:
        message = "no real model: run scripts/real-model.sh build"
        if os.environ.get("OPS_REQUIRE_REAL_MODEL") == "1":
            pytest.fail(message)
        pytest.skip(message)
    log = tmp_path_factory.mktemp("llama-server") / "llama-server.log"
    server = LlamaServer(model, log, parallel=SLOTS)
    yield server
    server.stop()


def test_the_server_root_is_beside_v1() -> None:
    assert server_root("http://127.0.0.1:8081/v1") == "http://127.0.0.1:8081"
    assert server_root("http://127.0.0.1:8081/v1/") == "http://127.0.0.1:8081"
    assert server_root("http://models.internal") == "http://models.internal"


@pytest.mark.real_model
def test_llama_server_says_its_slot_count(llama_server: LlamaServer) -> None:
    assert asyncio.run(read_server_slots(llama_server.url)) == SLOTS


def test_a_server_that_does_not_say_is_none() -> None:
    dev_model = ModelServer()
    try:
        assert asyncio.run(read_server_slots(dev_model.url)) is None
    finally:
        dev_model.stop()
    assert asyncio.run(read_server_slots(closed_port_url(), timeout_seconds=1)) is None


@pytest.mark.real_model
@pytest.mark.slow
def test_a_worker_set_to_0_runs_as_many_as_the_server_has_slots(
    llama_server: LlamaServer, tmp_path: Path
) -> None:
    with ai_stack(
        f"sqlite:///{tmp_path / 'ops.sqlite3'}",
        OPS_AI_LOCAL_URL=llama_server.url,
        OPS_AI_LOCAL_MODEL=llama_server.model.name,
        OPS_WORKER_CONCURRENCY="0",
    ) as st:
        (started,) = st.worker_events("ai_worker_started")
        assert started["concurrency"] == SLOTS
        assert started["concurrency_why"] == f"the local model server's {SLOTS} slot(s)"


@pytest.mark.slow
def test_a_worker_set_to_0_runs_one_when_the_server_does_not_say(tmp_path: Path) -> None:
    with ai_stack(
        f"sqlite:///{tmp_path / 'ops.sqlite3'}", dev_model=True, OPS_WORKER_CONCURRENCY="0"
    ) as st:
        (started,) = st.worker_events("ai_worker_started")
        assert started["concurrency"] == 1
        assert "does not say its slot count" in started["concurrency_why"]
