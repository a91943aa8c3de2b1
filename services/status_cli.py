"""``opsctl status``: is the install healthy, and if not, what is wrong (ADR 66).

It reads everything at once, each reading bounded, from outside the services: the
database itself, each gRPC service's standard health check, the gateway's
``/readyz``, and the queues with the operator's key; ``model.health`` judges what
was read, and the exit code says the worst.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from durable_ops.cli import EXIT_DEGRADED, EXIT_UNHEALTHY, EXIT_USAGE

if TYPE_CHECKING:
    from durable_ops.settings import Settings
    from durable_ops.stack.address_file import Target

STATUS_CALL_SECONDS = 3.0  # each of the operator's calls (the queues, the task types)
STATUS_GATEWAY_SECONDS = 3.5  # /readyz, which asks every backend first (at once, 2 s each)
STATUS_READ_SECONDS = 4.0  # the longest any reading is waited for: the database's too
# The gRPC services of an install, in the order shown: the gateway's backends, and the
# Operator service the Operations process serves beside its own (ADR 19).
STATUS_SERVICES = ("operations", "operator", "notifications", "workspace", "ai_admission")


def run(
    args: argparse.Namespace, settings: Settings, database: Target, operator: Callable[[], str]
) -> int:
    """Every check a line (or JSON); the exit code says the worst (``model.health``).
    ``operator``: the operator key's name, asked while reading (no key is an unread line)."""
    import json

    from durable_ops.model import health

    try:
        checks = _status_checks(args, settings, database, operator)
    except argparse.ArgumentTypeError as bad:
        print(f"opsctl status: {bad}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(health.as_json(checks)))
    else:
        print("\n".join(health.lines(checks)))
    worst = health.overall(checks)
    if worst is health.Health.OK:
        return 0
    return EXIT_UNHEALTHY if worst is health.Health.DOWN else EXIT_DEGRADED


def _status_checks(
    args: argparse.Namespace, settings: Settings, database: Target, operator: Callable[[], str]
) -> list[Any]:
    """Read everything at once, each reading bounded (``_read_at_once``); then judge."""
    from dataclasses import replace

    from durable_ops.console_cli import gateway_url
    from durable_ops.gateway.backends import KNOWN_BACKENDS
    from durable_ops.model import health
    from durable_ops.stack.address_file import choose_target
    from durable_ops.storage.availability import shown_url

    where = f"{shown_url(database.address, database.source)} (from {database.source})"
    # Each target as every command finds it: its variable, else the running opsctl up's.
    fields = {name: KNOWN_BACKENDS[name][0] for name in STATUS_SERVICES if name != "operator"}
    targets = {name: choose_target(field, None, os.environ) for name, field in fields.items()}
    targets["operator"] = targets["operations"]
    addresses: dict[str, Any] = {fields[name]: targets[name].address for name in fields}
    settings = replace(settings, **addresses)
    # Under Compose the gateway is another container: OPS_GATEWAY_URL says where (compose.yaml).
    given, named = args.gateway_url, "--gateway-url"
    if given is None and settings.gateway_url:
        given, named = settings.gateway_url, "OPS_GATEWAY_URL"
    base = gateway_url(given, settings.gateway_bind, flag_name=named)
    readyz = f"{base}readyz"
    found = _read_at_once(
        {
            "database": lambda: _read_database(database),
            "services": lambda: _service_states(settings),
            "gateway": lambda: _readyz(readyz),
            "queues": lambda: _read_queues(settings, operator),
        },
        STATUS_READ_SECONDS,
    )
    reading, switch = _database_findings(where, found["database"])
    checks = [health.database(where, reading)]
    states = found["services"]
    for name in STATUS_SERVICES:
        target = targets[name]
        # Each health check has its own deadline: only a failure of them all leaves no dict.
        state = states[name] if isinstance(states, dict) else _unread(states)
        checks.append(health.service(name.replace("_", "-"), target.address, target.source, state))
    answer = found["gateway"]
    if not isinstance(answer, health.GatewayAnswer):
        answer = _unread(answer, STATUS_GATEWAY_SECONDS)
    checks.append(health.gateway(readyz, answer))
    checks.append(health.ai_switch(switch))
    queues, paused = _queue_findings(found["queues"], targets["operations"])
    checks.append(health.task_types(paused))
    checks += health.queues(queues, args.max_wait)
    checks.append(health.workers(queues, args.max_wait))
    return checks


def _read_at_once(readers: dict[str, Callable[[], object]], seconds: float) -> dict[str, object]:
    """Each reader in a thread of its own, all at once: what each returned, or the exception
    it raised (never raised here), or ``TimeoutError`` for one still reading after
    ``seconds``. Daemon threads: one left hanging (a connect no database answers) does not
    keep opsctl from exiting."""
    import threading
    import time

    found: dict[str, object] = {}

    def read(name: str, reader: Callable[[], object]) -> None:
        try:
            found[name] = reader()
        except Exception as error:  # said in the check's line: status never shows a traceback
            found[name] = error

    threads = [
        threading.Thread(target=read, args=item, name=f"status-{item[0]}", daemon=True)
        for item in readers.items()
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + seconds
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return {name: found.get(name, TimeoutError()) for name in readers}


def _timed_out(error: object) -> bool:
    """A reading that ran out of time: a thread still reading, or httpx's own timeout, which
    it raises as a subclass (``ReadTimeout``, ``ConnectTimeout``) of ``TimeoutException``."""
    return isinstance(error, TimeoutError) or any(
        cls.__name__ == "TimeoutException" for cls in type(error).__mro__
    )


def _unread(error: object, seconds: float = STATUS_READ_SECONDS) -> Any:
    """What a reader raised, as an operator reads it: the error's own words, on one line."""
    from durable_ops.model.health import Unread

    if _timed_out(error):
        return Unread(f"no answer within {seconds:g} s")
    return Unread(" ".join(str(error).split()) or type(error).__name__)


def _read_database(database: Target) -> object:
    from durable_ops.storage import status
    from durable_ops.storage.availability import reaching

    with reaching(database.address, database.source):  # its failures worded as every command's
        return status.read(database.address)


def _database_findings(where: str, found: object) -> tuple[Any, Any]:
    """What was read of the database, or why nothing was; and the AI switch."""
    from durable_ops.model.health import Unread

    if isinstance(found, tuple):
        reading, switch = found
        behind = Unread("the schema is behind this release: see the database's line")
        return reading, behind if switch is None else switch
    if _timed_out(found):
        found = f"the database {where} did not answer within {STATUS_READ_SECONDS:g} s"
    return _unread(found), Unread("the database could not be read: see its line")


def _service_states(settings: Settings) -> dict[str, str]:
    """Each gRPC service's standard health check, all at once, as the gateway's ``/readyz``
    asks it (``serving_state``), at the targets ``settings`` name, TLS beyond loopback."""
    from durable_ops.api.operator.v1 import operator_pb2
    from durable_ops.gateway.backends import BackendSpec, serving_state, spec_from_settings
    from durable_ops.rpc.client import open_channel
    from durable_ops.rpc.tls import authority_of

    operator = operator_pb2.DESCRIPTOR.services_by_name["OperatorService"].full_name
    specs = [
        BackendSpec(name, settings.operations_target, operator)
        if name == "operator"
        else spec_from_settings(settings, name)
        for name in STATUS_SERVICES
    ]
    ca = authority_of(settings.service_keys_dir)

    async def ask(target: str, health_service: str) -> str:
        channel = open_channel(target, ca)
        try:
            return await serving_state(channel, health_service)
        finally:
            await channel.close()

    async def ask_all() -> list[str]:
        return list(await asyncio.gather(*(ask(s.target, s.health_service) for s in specs)))

    return dict(zip(STATUS_SERVICES, asyncio.run(ask_all()), strict=True))


def _readyz(url: str) -> object:
    """The gateway's readiness: its status code, and each backend's state it names."""
    import httpx

    from durable_ops.model.health import GatewayAnswer

    response = httpx.get(url, timeout=STATUS_GATEWAY_SECONDS)
    try:
        said = response.json()
    except ValueError:  # not the gateway's JSON: the status code says enough
        said = {}
    backends = said.get("backends") if isinstance(said, dict) else None
    if not isinstance(backends, dict):
        backends = {}
    return GatewayAnswer(response.status_code, {str(k): str(v) for k, v in backends.items()})


def _read_queues(settings: Settings, operator_name: Callable[[], str]) -> object:
    """As ``opsctl operations queues`` reads them, with the operator's key."""
    from durable_ops.operator_cli import Operator, read_queues

    operator = Operator(settings, operator_name())
    try:
        return read_queues(operator, STATUS_CALL_SECONDS)
    finally:
        operator.close()


def _queue_findings(found: object, operations: Target) -> tuple[Any, Any]:
    """The queues and the paused task types, or why they could not be read."""
    from durable_ops.model import health
    from durable_ops.operator_cli import Queues

    if not isinstance(found, Queues):
        unread = _operator_failure(found, operations)
        return unread, unread
    queues = [
        health.Queue(**{name: row[name] for name in health.Queue.__dataclass_fields__})
        for row in found.rows
    ]
    paused = [
        health.PausedType(row["task_type"], row["paused_by"] or "", row["paused_at"] or "")
        for row in found.task_types
        if row["paused"]
    ]
    return queues, paused


def _operator_failure(error: object, operations: Target) -> Any:
    """Why the Operator service's queues could not be read, in an operator's words."""
    import grpc

    from durable_ops.operator_cli import DATABASE_AWAY, error_code

    service = f"the Operations service at {operations.address}"
    call: Any = error
    if _timed_out(error) or (
        isinstance(error, grpc.RpcError) and call.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    ):
        return _unread(f"{service} did not answer within {STATUS_CALL_SECONDS:g} s")
    if not isinstance(error, grpc.RpcError):
        return _unread(error)  # no operator key, say: its own words say how to make one
    code = error_code(error)
    if code == "starting":
        return _unread(f"{service} is starting: it waits for its database")
    if code in DATABASE_AWAY:
        return _unread(f"{service} answered that its database is away ({code})")
    if code == "unavailable":  # gRPC's own status: no service of ours answered
        return _unread(f"{service} did not answer (see its line)")
    return _unread(f"{service} refused the operator's call: {code}: {call.details()}")
