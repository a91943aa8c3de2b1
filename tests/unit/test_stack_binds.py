"""The stack's addresses: parsed with the variable named, moved together, and probed."""

from __future__ import annotations

import socket
from dataclasses import replace
from typing import Any

import pytest

from durable_ops.settings import Settings
from durable_ops.stack.binds import (
    PORT_BASE_MAX,
    BadAddress,
    Bind,
    local_to_the_stack,
    parse_address,
    stack_binds,
    with_port_base,
)
from durable_ops.stack.preflight import in_use, problems


def test_the_default_stack_listens_on_six_addresses() -> None:
    binds = stack_binds(Settings())
    assert [bind.variable for bind in binds] == [
        "OPS_GATEWAY_BIND",
        "OPS_OPERATIONS_BIND",
        "OPS_NOTIFICATIONS_BIND",
        "OPS_AI_ADMISSION_BIND",
        "OPS_WORKSPACE_BIND",
        "OPS_DEV_MODEL_BIND",
    ]
    assert binds[0].address == "127.0.0.1:8080"


# ":8080" too: the gateway, the development model and the metrics servers refuse it, and a
# child that refuses its address at every restart is what `opsctl up` checks to avoid.
@pytest.mark.parametrize(
    "raw", ["8080", "localhost:", "host:http", "host:0", "host:70000", ":8080", "[]:8080"]
)
def test_a_bad_address_names_its_variable(raw: str) -> None:
    with pytest.raises(BadAddress, match="OPS_GATEWAY_BIND must be HOST:PORT"):
        parse_address("gateway_bind", raw)


def test_an_ipv6_address_keeps_its_brackets() -> None:
    bind = parse_address("gateway_bind", "[::1]:9000")
    assert (bind.host, bind.port, bind.address) == ("::1", 9000, "[::1]:9000")


def test_port_base_moves_every_bind_and_keeps_each_host() -> None:
    settings = replace(Settings(), gateway_bind="0.0.0.0:80", worker_metrics_bind="127.0.0.1:1")
    moved = with_port_base(settings, 20000)
    assert [bind.address for bind in stack_binds(moved)] == [
        "0.0.0.0:20000",
        "127.0.0.1:20001",
        "127.0.0.1:20002",
        "127.0.0.1:20003",
        "127.0.0.1:20004",
        "127.0.0.1:20005",
        "127.0.0.1:20006",
    ]


def test_port_base_moves_every_metrics_bind_that_is_set_and_leaves_the_unset_off() -> None:
    explicit: dict[str, Any] = {
        "gateway_metrics_bind": "127.0.0.1:9464",
        "operations_metrics_bind": "0.0.0.0:9465",
        "notifications_metrics_bind": "127.0.0.1:9466",
        "ai_admission_metrics_bind": "127.0.0.1:9467",
        "workspace_metrics_bind": "127.0.0.1:9468",
    }
    moved = with_port_base(replace(Settings(), **explicit), 20000)
    assert {name: getattr(moved, name) for name in explicit} == {
        "gateway_metrics_bind": "127.0.0.1:20007",
        "operations_metrics_bind": "0.0.0.0:20008",
        "notifications_metrics_bind": "127.0.0.1:20009",
        "ai_admission_metrics_bind": "127.0.0.1:20010",
        "workspace_metrics_bind": "127.0.0.1:20011",
    }
    assert moved.worker_metrics_bind == ""  # unset: still off
    # Each is checked before start-up and handed to the children like the other binds.
    assert {bind.setting for bind in stack_binds(moved)} >= set(explicit)


@pytest.mark.parametrize("base", [0, PORT_BASE_MAX + 1])
def test_port_base_out_of_range_is_refused(base: int) -> None:
    with pytest.raises(BadAddress, match="--port-base must be between 1 and"):
        with_port_base(Settings(), base)


def test_targets_and_the_default_model_follow_the_binds() -> None:
    local = local_to_the_stack(
        with_port_base(replace(Settings(), workspace_bind="0.0.0.0:1"), 30000)
    )
    assert local.operations_target == "127.0.0.1:30001"
    assert local.workspace_target == "127.0.0.1:30004"  # a wildcard is reached on loopback
    assert local.ai_local_url == "http://127.0.0.1:30005/v1"


@pytest.mark.parametrize(
    ("raw", "dialled"),
    [
        ("0.0.0.0:8080", "127.0.0.1:8080"),
        ("[::]:8080", "[::1]:8080"),
        ("192.0.2.10:8080", "192.0.2.10:8080"),
        ("[::1]:8080", "[::1]:8080"),
    ],
)
def test_a_wildcard_bind_is_dialled_on_loopback(raw: str, dialled: str) -> None:
    assert parse_address("gateway_bind", raw).dialled == dialled


def test_a_model_url_the_operator_chose_is_kept() -> None:
    chosen = replace(Settings(), ai_local_url="http://127.0.0.1:11434/v1")
    assert local_to_the_stack(with_port_base(chosen, 30000)).ai_local_url == chosen.ai_local_url


def test_a_listening_port_is_in_use_and_a_closed_one_is_not() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        listener.listen()
        bind = Bind("gateway_bind", "127.0.0.1", port)
        assert in_use(bind)
        [problem] = problems([bind])
        assert problem.startswith(f"127.0.0.1:{port} is already in use (OPS_GATEWAY_BIND)")
        assert "--port-base N" in problem
    assert not in_use(bind)


def test_a_port_shared_through_so_reuseport_is_in_use() -> None:
    """gRPC binds with SO_REUSEPORT: a second stack must not quietly share its ports."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        assert in_use(Bind("operations_bind", "127.0.0.1", listener.getsockname()[1]))


def test_two_settings_naming_one_address_is_a_problem() -> None:
    binds = [Bind("gateway_bind", "127.0.0.1", 1), Bind("workspace_bind", "127.0.0.1", 1)]
    assert any("OPS_WORKSPACE_BIND and OPS_GATEWAY_BIND both name" in p for p in problems(binds))
