"""What ``opsctl status`` makes of what it read: a verdict per check, in plain words. Pure.

The command (``cli.cmd_status``) reads the database, asks each gRPC service's
standard health check and the gateway's ``/readyz``, and reads the queues with
the operator's key; it hands here what it found, or ``Unread`` with why it found
nothing. Each function answers one ``Check`` (several for the queues, one per
task type), whose ``health`` is:

========  ==============================================================
ok        works as it should
degraded  works, but something an operator should look at: AI switched off,
          a task type paused, a queue waiting longer than ``max_wait``, leases
          the sweeper has not ended
unknown   could not be read, for a reason the line gives (the database or
          the Operations service is down: their own lines say so; no
          operator key)
down      does not work: the database does not answer or its schema is behind
          this release, a service or the gateway does not answer or is not
          serving
========  ==============================================================

``overall`` is the worst of them (in that order), and the exit code says it
(``status_cli.run``). ``lines`` and ``as_json`` are what is printed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from durable_ops.model.operator import age_text

# The sweeper looks for leases that ran out every second (``operations.tuning``); one
# still running this long past its lease says the sweeper is failing or far behind.
LEASE_OVERDUE_SECONDS = 30


class Health(StrEnum):
    OK = "ok"
    DEGRADED = "degraded"
    UNKNOWN = "unknown"
    DOWN = "down"


SEVERITY = {Health.OK: 0, Health.DEGRADED: 1, Health.UNKNOWN: 2, Health.DOWN: 3}


@dataclass(frozen=True)
class Check:
    name: str  # what the line is about: "database", "workspace", "queue strategy.snapshot"
    health: Health
    reason: str  # a sentence an operator reads in an incident
    details: Mapping[str, Any] = field(default_factory=dict)  # what --json adds


@dataclass(frozen=True)
class Unread:
    """A reading that did not come, and why, in words."""

    why: str


@dataclass(frozen=True)
class DatabaseReading:
    engine: str  # "MariaDB", "SQLite"
    version: str
    revision: str | None  # stamped in the database; None: no schema at all
    head: str  # this release's newest revision
    pending: Sequence[str]  # what `opsctl migrate` would apply, oldest first


@dataclass(frozen=True)
class PausedType:
    task_type: str
    paused_by: str
    paused_at: str  # ISO 8601


@dataclass(frozen=True)
class Queue:
    """One task type's unfinished operations, as the Operator service counts them; ages
    in seconds to the service's own clock."""

    task_type: str
    paused: bool
    queued: int
    running: int
    waiting_for_retry: int
    waiting_for_external_fallback: int
    oldest_queued_seconds: int | None  # none due and waiting: None
    running_past_lease: int
    longest_past_lease_seconds: int | None


def database(where: str, found: DatabaseReading | Unread) -> Check:
    """``where``: the database as it may be shown (no password) and where its URL came from."""
    if isinstance(found, Unread):
        return Check("database", Health.DOWN, found.why, {"database": where})
    details = {
        "database": where,
        "engine": found.engine,
        "version": found.version,
        "revision": found.revision,
        "head": found.head,
        "pending": list(found.pending),
    }
    engine = f"{found.engine} {found.version} at {where}"
    if found.revision is None:
        said = f"{engine} has no schema: run `opsctl migrate`"
        return Check("database", Health.DOWN, said, details)
    if found.pending:
        count = len(found.pending)
        said = (
            f"{engine}: schema at {found.revision}, behind this release's {found.head} by"
            f" {count} revision{'' if count == 1 else 's'}; the services refuse it: run"
            " `opsctl migrate`"
        )
        return Check("database", Health.DOWN, said, details)
    if found.revision != found.head:
        said = (
            f"{engine}: schema at {found.revision}, newer than this release's {found.head}"
            " (a newer release migrated it; this one runs on it)"
        )
        return Check("database", Health.OK, said, details)
    return Check("database", Health.OK, f"{engine}: schema at head ({found.head})", details)


# The states ``gateway.backends.serving_state`` answers, as an operator reads them.
SERVICE_STATES = {
    "serving": (Health.OK, "serving at {target}"),
    "not_serving": (
        Health.DOWN,
        "answers at {target} but is not serving: starting, stopping, or its database does"
        " not answer",
    ),
    "unreachable": (
        Health.DOWN,
        "nothing answers at {target} ({source}): not running, or not at that address",
    ),
    "unknown_service": (
        Health.DOWN,
        "something answers at {target} ({source}) but serves no {name}: another program or"
        " another service at that address",
    ),
}


def service(name: str, target: str, source: str, state: str | Unread) -> Check:
    """A gRPC service's standard health check: ``state`` as the gateway's ``/readyz`` says
    it (``gateway.backends.serving_state``), or why it could not be asked."""
    details = {"target": target, "source": source}
    if isinstance(state, Unread):
        return Check(name, Health.DOWN, f"cannot ask {target} ({source}): {state.why}", details)
    health, words = SERVICE_STATES.get(state, (Health.DOWN, f"health answered {state}"))
    said = words.format(target=target, source=source, name=name)
    return Check(name, health, said, {**details, "state": state})


@dataclass(frozen=True)
class GatewayAnswer:
    status_code: int
    backends: Mapping[str, str]  # /readyz's, each backend's state; empty when it gave none


def gateway(url: str, found: GatewayAnswer | Unread) -> Check:
    """``url``: the gateway's /readyz."""
    if isinstance(found, Unread):
        return Check("gateway", Health.DOWN, f"{url}: {found.why}", {"url": url})
    details = {"url": url, "status_code": found.status_code, "backends": dict(found.backends)}
    if found.status_code == 200:
        return Check("gateway", Health.OK, f"ready at {url}", details)
    down = sorted(name for name, state in found.backends.items() if state != "serving")
    if found.status_code == 503 and down:
        backends = ", ".join(f"{name} {found.backends[name]}" for name in down)
        said = f"answers at {url} but is not ready: {backends}"
        return Check("gateway", Health.DOWN, said, details)
    said = f"{url} answered HTTP {found.status_code}: is the gateway at that address?"
    return Check("gateway", Health.DOWN, said, details)


def ai_switch(found: bool | Unread) -> Check:
    """The live global AI switch (``opsctl ai enable|disable``)."""
    if isinstance(found, Unread):
        return Check("ai-switch", Health.UNKNOWN, found.why)
    if found:
        return Check("ai-switch", Health.OK, "on: analyses are admitted", {"ai_enabled": True})
    said = "off: every new analysis is refused (ai_unavailable); `opsctl ai enable` turns it on"
    return Check("ai-switch", Health.DEGRADED, said, {"ai_enabled": False})


def task_types(found: Sequence[PausedType] | Unread) -> Check:
    if isinstance(found, Unread):
        return Check("task-types", Health.UNKNOWN, found.why)
    details = {
        "paused": [
            {"task_type": p.task_type, "paused_by": p.paused_by, "paused_at": p.paused_at}
            for p in found
        ]
    }
    if not found:
        return Check("task-types", Health.OK, "none paused", details)
    which = ", ".join(f"{p.task_type} (by {p.paused_by} at {p.paused_at})" for p in found)
    said = f"paused: {which}; their queued work waits: `opsctl tasks resume TYPE`"
    return Check("task-types", Health.DEGRADED, said, details)


def queues(found: Sequence[Queue] | Unread, max_wait: int) -> list[Check]:
    """A line per task type with unfinished work; degraded where the oldest due queued
    operation has waited longer than ``max_wait`` seconds."""
    if isinstance(found, Unread):
        return [Check("queues", Health.UNKNOWN, found.why)]
    if not found:
        return [Check("queues", Health.OK, "no unfinished operations")]
    return [_queue(queue, max_wait) for queue in found]


def _queue(queue: Queue, max_wait: int) -> Check:
    waited = queue.oldest_queued_seconds
    parts = []
    if queue.queued:
        due = "none due yet" if waited is None else f"the oldest due for {age_text(waited)}"
        parts.append(f"{queue.queued} queued ({due})")
    counts = (
        (queue.running, "running"),
        (queue.waiting_for_retry, "waiting to retry"),
        (queue.waiting_for_external_fallback, "waiting for the external route"),
    )
    parts += [f"{count} {what}" for count, what in counts if count]
    said = ", ".join(parts) + (" (paused)" if queue.paused else "")
    health = Health.OK
    if waited is not None and waited > max_wait:
        health = Health.DEGRADED
        said += f"; waiting longer than {age_text(max_wait)}"
    details = {name: getattr(queue, name) for name in Queue.__dataclass_fields__}
    return Check(f"queue {queue.task_type}", health, said, details)


def workers(found: Sequence[Queue] | Unread, max_wait: int) -> Check:
    """What runs: under a live lease, or past it (the sweeper ends those within seconds:
    one left longer says it is not keeping up); and task types whose due work waits
    longer than ``max_wait`` seconds with nothing of theirs running."""
    if isinstance(found, Unread):
        return Check("workers", Health.UNKNOWN, found.why)
    running = sum(queue.running for queue in found)
    past = sum(queue.running_past_lease for queue in found)
    longest = max((q.longest_past_lease_seconds or 0 for q in found), default=0)
    live = max(0, running - past)  # two reads: a lease may have run out between them
    starved = [
        queue
        for queue in found
        if not queue.paused
        and queue.running == 0
        and queue.oldest_queued_seconds is not None
        and queue.oldest_queued_seconds > max_wait
    ]
    details = {
        "running": running,
        "live_leases": live,
        "running_past_lease": past,
        "longest_past_lease_seconds": longest if past else None,
        "waiting_with_none_running": [queue.task_type for queue in starved],
    }
    said = f"{live} running under a live lease"
    health = Health.OK
    if past and longest > LEASE_OVERDUE_SECONDS:
        health = Health.DEGRADED
        said += (
            f"; {past} running past {'its' if past == 1 else 'their'} lease, the longest by"
            f" {age_text(longest)}: the sweeper is not keeping up (see the Operations"
            " process's sweep_failed lines)"
        )
    elif past:
        said += f"; {past} just past {'its' if past == 1 else 'their'} lease (the sweeper ends it)"
    if starved:
        health = Health.DEGRADED
        oldest = max(queue.oldest_queued_seconds or 0 for queue in starved)
        names = ", ".join(queue.task_type for queue in starved)
        said += (
            f"; nothing of {names} runs while its queued work waits (the oldest due for"
            f" {age_text(oldest)}): is a worker for it up?"
        )
    return Check("workers", health, said, details)


def overall(checks: Iterable[Check]) -> Health:
    return max((check.health for check in checks), key=SEVERITY.__getitem__, default=Health.OK)


def lines(checks: Sequence[Check]) -> list[str]:
    """A line per check, ``health  name  reason`` in columns, then the verdict."""
    width = max((len(check.name) for check in checks), default=0)
    shown = [f"{check.health.value:<8}  {check.name:<{width}}  {check.reason}" for check in checks]
    return [*shown, verdict(checks)]


def verdict(checks: Sequence[Check]) -> str:
    """``all 9 checks ok``, or which are not, the worst first."""
    if overall(checks) is Health.OK:
        return f"all {len(checks)} checks ok"
    said = []
    for health in sorted(Health, key=SEVERITY.__getitem__, reverse=True):
        names = [check.name for check in checks if check.health is health]
        if names and health is not Health.OK:
            said.append(f"{health.value}: {', '.join(names)}")
    return "; ".join(said)


def as_json(checks: Sequence[Check]) -> dict[str, Any]:
    return {
        "status": overall(checks).value,
        "checks": [
            {
                "name": check.name,
                "status": check.health.value,
                "reason": check.reason,
                "details": dict(check.details),
            }
            for check in checks
        ],
    }
