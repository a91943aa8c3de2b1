"""A backend the gateway cannot reach, as an operator reads it: two log lines an outage.

Every call that finds nothing answering at a backend (gRPC's own ``UNAVAILABLE``: no
process listens, the connection broke) answers its user a 503; the first of a run logs
``backend_unavailable`` (warning, with the backend's name) and the first answer after it
``backend_recovered`` (how long, how many calls failed), not a line per request. An
answer the service gave itself, a refusal included, counts as the backend answering; a
call that timed out or was cancelled says neither. Kept per ``Backends``, in this
gateway process's memory.
"""

from __future__ import annotations

import time
import weakref
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import grpc
import structlog

from durable_ops.gateway.backends import Backends
from durable_ops.logs import FailureRun
from durable_ops.rpc.errors import ERROR_CODE

_log = structlog.get_logger(__name__)


class Outages:
    """Which backends are unreachable now, since when, and how many calls that cost."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._runs: defaultdict[str, FailureRun] = defaultdict(lambda: FailureRun(clock))

    def failed(self, backend: str) -> None:
        if self._runs[backend].failed():
            _log.warning("backend_unavailable", backend=backend)

    def answered(self, backend: str) -> None:
        run = self._runs[backend].ended()
        if run is not None:
            seconds, calls = run
            _log.info(
                "backend_recovered",
                backend=backend,
                unavailable_seconds=seconds,
                failed_calls=calls,
            )


_OUTAGES: weakref.WeakKeyDictionary[Backends, Outages] = weakref.WeakKeyDictionary()


def outages_of(backends: Backends) -> Outages:
    outages = _OUTAGES.get(backends)
    if outages is None:
        outages = _OUTAGES[backends] = Outages()
    return outages


def _worded_by_the_service(exc: grpc.aio.AioRpcError) -> bool:
    # As ``backends.translate`` tells a service's own answer from gRPC's.
    return any(key == ERROR_CODE for key, _value in exc.trailing_metadata() or ())


@contextmanager
def watched(backends: Backends, backend: str | None) -> Iterator[None]:
    """Note what the call to ``backend`` made inside says of it (None: nothing is noted)."""
    try:
        yield
    except grpc.aio.AioRpcError as exc:
        if backend is not None:
            if _worded_by_the_service(exc):
                outages_of(backends).answered(backend)
            elif exc.code() == grpc.StatusCode.UNAVAILABLE:
                outages_of(backends).failed(backend)
        raise
    if backend is not None:
        outages_of(backends).answered(backend)
