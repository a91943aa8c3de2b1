"""A bound on the long-lived calls one service key holds open on a server.

A claim that waits for work, a lease stream (``HoldLeases``, ``Heartbeat``), an
owner's watch (``WatchOwner``) and a wait on an operation (``WaitOperation``,
ours and google.longrunning's) each stay open for seconds to hours, and each
costs the server a call, a task and its buffers. Without a bound, one stolen
worker or producer key (SPEC §2: a key per role, the trust table in
docs/operations.md) could open thousands and exhaust the server's memory and
tasks. So each of those calls holds a slot of its key (``OpenCalls.holding``)
for as long as it is open, however it ends (an answer, an error, the client's
cancel or disconnect); one more is refused ``RESOURCE_EXHAUSTED``
``too_many_open_calls`` with a retry-after of a second, and the first refusal
of a key that fills up is logged (``open_calls_refused``), once until it has
room again.

The slot is the key's, not the credential's ``sub``: the key that verified the
credential is the only identity a thief cannot choose, since a stolen key
mints credentials with any ``sub``. A key and its ``.previous`` public key
(a rotation under way) share one name, so they share the bound.

The count is one server's (one replica's): a fleet spread over replicas is
bounded on each. Nothing else bounds it: ``grpc.max_concurrent_streams``
(unset in ``rpc.server.SERVER_OPTIONS``) is per HTTP/2 connection, and a
client opens as many connections as it likes; ``grpc.aio.server``'s
``maximum_concurrent_rpcs`` (unset too) counts every caller together, so a
thief who filled it would starve the legitimate fleet instead of itself.
Connections that make no call are not counted here: each holds a socket while
its client keeps it alive (keepalive only ends dead ones), which a firewall or
a proxy in front of the services bounds per client address.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import structlog

from durable_ops.model.errors import CapacityExceeded
from durable_ops.model.scope import Role
from durable_ops.rpc.scope import caller_key

KEY_OPEN_CALLS: Final = 1_024
"""What a worker or producer key holds open at once on one server: room for 256 SDK worker
processes sharing the key on one replica at their worst (512 as they usually are), and for
five times figure 8's 200 lease streams.

An SDK worker process (``durable_ops.worker``, the AI worker included: ADR 27) holds one
claim at a time (its producer awaits each claim's answer before it asks again) and one
``HoldLeases`` stream (``worker.lease.LeaseStream``, ADR 26). After its network broke, the
server may still count the broken claim and stream until keepalive notices (60 + 20 s,
``SERVER_OPTIONS``) while their successors run: at most 4 calls per process, usually 2.
A raw worker on the API holds one ``Heartbeat`` stream per lease: figure 8
(``benchmarks.lease_channel``) and ``tests/integration/test_heartbeat_streams.py`` hold
200 with one key on one replica. A producer's only long-lived call is a wait on an
operation. A worker refused its stream loses the leases it holds
(``lease_stream_refused``), so the bound sits far above what a fleet needs."""

GATEWAY_OPEN_CALLS: Final = 16_384
"""What the gateway key holds open at once on one server: sixteen times figure 12's
thousand open tabs. Every gateway process shares the key, and its calls are its users':
one ``WatchOwner`` per open tab on every replica (``gateway.events``) and one
``WaitOperation`` per long-poll, at most ``OPS_GATEWAY_LONG_POLLS_PER_USER`` (16) per
user and gateway process. So its figure is the open tabs a deployment serves, not a
fleet: figure 12 (``benchmarks.live_events``) holds 1,000 idle streams on one gateway."""

TOO_MANY_OPEN_CALLS: Final = "too_many_open_calls"
RETRY_AFTER_SECONDS: Final = 1

_log = structlog.get_logger(__name__)


class OpenCalls:
    """The long-lived calls each key holds open on this server, each key at most its bound
    (``KEY_OPEN_CALLS``, or ``GATEWAY_OPEN_CALLS`` for a gateway key)."""

    def __init__(
        self, *, per_key: int = KEY_OPEN_CALLS, per_gateway_key: int = GATEWAY_OPEN_CALLS
    ) -> None:
        if per_key < 1 or per_gateway_key < 1:
            raise ValueError("a key may hold at least one call open")
        self._per_key = per_key
        self._per_gateway_key = per_gateway_key
        self._held: dict[str, int] = {}  # by key name; a key holding none has no entry
        self._full: set[str] = set()  # refused since they last had room: logged once

    def held(self, key_name: str) -> int:
        return self._held.get(key_name, 0)

    @contextmanager
    def holding(self) -> Iterator[None]:
        """A slot of the current call's key while the block runs, else ``CapacityExceeded``
        ``too_many_open_calls``. Enter it after the scope check: a call refused for its
        scope takes no slot."""
        key = caller_key()
        bound = self._per_gateway_key if key.role is Role.GATEWAY else self._per_key
        held = self._held.get(key.name, 0)
        if held >= bound:
            if key.name not in self._full:
                self._full.add(key.name)
                _log.warning("open_calls_refused", key=key.name, role=key.role.value, open=held)
            refused = CapacityExceeded(
                # Neutral: behind the gateway's key the one refused is a user, not the holder.
                "the service holds too many long-lived calls open for this caller's key;"
                " try again shortly",
                retry_after_seconds=RETRY_AFTER_SECONDS,
            )
            refused.code = TOO_MANY_OPEN_CALLS
            raise refused
        self._held[key.name] = held + 1
        try:
            yield
        finally:
            remaining = self._held[key.name] - 1
            if remaining:
                self._held[key.name] = remaining
            else:
                del self._held[key.name]
            if remaining < bound:
                self._full.discard(key.name)
