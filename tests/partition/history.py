"""A recorded history: every client call as invoke, then ok, fail or unknown, with times.

Times are ``time.monotonic()`` seconds: one clock for every process of the host,
so a worker process's lines and the test's own calls sort together. A call that
timed out or whose connection dropped is ``unknown``: it may have taken effect.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from enum import StrEnum


class Outcome(StrEnum):
    OK = "ok"
    FAIL = "fail"  # the service answered that it did not happen
    UNKNOWN = "unknown"  # a timeout, a dropped connection, no answer: it may have happened


class Kind(StrEnum):
    CREATE = "create"  # args: owner, key; result: operation_id
    ADMIT = "admit"  # an AI admission; args: owner, key, tokens; result: operation_id
    CANCEL = "cancel"  # args: owner, operation_id
    CLAIM = "claim"  # result: operation_id, owner, lease_token
    COMPLETE = "complete"  # args: operation_id, lease_token


@dataclass(frozen=True)
class Call:
    process: str  # who called: "grpc-alice", "http-bob", "worker-1", "sdk-worker"...
    kind: Kind
    invoked: float
    ended: float
    outcome: Outcome
    args: Mapping[str, str] = field(default_factory=dict)
    result: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Call:
        args = data.get("args") or {}
        result = data.get("result") or {}
        assert isinstance(args, Mapping)
        assert isinstance(result, Mapping)
        return cls(
            process=str(data["process"]),
            kind=Kind(str(data["kind"])),
            invoked=float(str(data["invoked"])),
            ended=float(str(data["ended"])),
            outcome=Outcome(str(data["outcome"])),
            args={str(k): str(v) for k, v in args.items()},
            result={str(k): str(v) for k, v in result.items()},
        )


class Pending:
    """A call in flight: ``ok``/``fail``/``unknown`` end it once (the first one counts)."""

    def __init__(self, history: History, process: str, kind: Kind, args: Mapping[str, str]):
        self._history = history
        self.process = process
        self.kind = kind
        self.args = dict(args)
        self.invoked = time.monotonic()
        self.outcome: Outcome | None = None

    @property
    def outcome_unknown(self) -> bool:
        return self.outcome is Outcome.UNKNOWN

    def _end(self, outcome: Outcome, result: Mapping[str, str]) -> None:
        if self.outcome is not None:
            return
        self.outcome = outcome
        self._history.add(
            Call(self.process, self.kind, self.invoked, time.monotonic(), outcome,
                 self.args, dict(result))
        )  # fmt: skip

    def ok(self, **result: str) -> None:
        self._end(Outcome.OK, result)

    def fail(self, **result: str) -> None:
        self._end(Outcome.FAIL, result)

    def unknown(self, **result: str) -> None:
        self._end(Outcome.UNKNOWN, result)


class History:
    """Thread-safe: clients append as their calls end."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: list[Call] = []

    def add(self, call: Call) -> None:
        with self._lock:
            self._calls.append(call)

    def extend(self, calls: Iterable[Call]) -> None:
        with self._lock:
            self._calls.extend(calls)

    @contextmanager
    def call(self, process: str, kind: Kind, **args: str) -> Iterator[Pending]:
        """Record one call; an exception the body did not classify makes it ``unknown``."""
        pending = Pending(self, process, kind, args)
        try:
            yield pending
        except BaseException:
            pending.unknown(error="unclassified")
            raise
        finally:
            pending.unknown(error="no answer recorded")  # a no-op when the body ended it

    @property
    def calls(self) -> list[Call]:
        with self._lock:
            return sorted(self._calls, key=lambda call: call.invoked)

    def dump(self) -> str:
        return "\n".join(json.dumps(call.to_json(), sort_keys=True) for call in self.calls)


def load(lines: Iterable[str]) -> list[Call]:
    return [Call.from_json(json.loads(line)) for line in lines if line.strip()]
