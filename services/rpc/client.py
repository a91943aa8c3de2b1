"""Client side: channels to our services, the metadata every call carries, typed calls."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol, TypeVar

import grpc
from google.protobuf.message import Message
from grpc_reflection.v1alpha import reflection_pb2_grpc

from durable_ops.model.scope import Role
from durable_ops.rpc.credentials import DEFAULT_TTL_SECONDS, mint_service_token
from durable_ops.rpc.keys import SigningKey, own_key
from durable_ops.rpc.scope import AUTHORIZATION, OWNER_ID
from durable_ops.rpc.tls import channel_credentials, checked_name_options
from durable_ops.settings import Settings

# Matches the server's SERVER_OPTIONS: pings no more often than it permits
# (10 s without data), so long heartbeat streams survive idle NATs and proxies.
# round_robin spreads calls over every address a target names or resolves to
# (``ipv4:10.0.0.5:50051,10.0.0.6:50051``, or a DNS name with one A record per
# replica) and skips a replica that stopped answering; with one address it
# behaves like the default pick_first.
CHANNEL_OPTIONS: tuple[tuple[str, int | str], ...] = (
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.lb_policy_name", "round_robin"),
    # A channel tries a lost server again after a backoff growing to 120 s by default:
    # a backend back from a 40 s outage was still "unreachable" to the gateway (its
    # users' 503s, /readyz) some 26 s later. Capped, it is found within 5 s of its return.
    ("grpc.max_reconnect_backoff_ms", 5_000),
)

# What ``ServiceCaller.metadata`` builds: the credential, and the owner where there is one.
Metadata = tuple[tuple[str, str], ...]

_Request_contra = TypeVar("_Request_contra", bound=Message, contravariant=True)
_Response_co = TypeVar("_Response_co", bound=Message, covariant=True)


class UnaryMethod(Protocol[_Request_contra, _Response_co]):
    """A unary method of a generated stub on a ``grpc.aio`` channel (``stub.GetOperation``).

    The generated ``...AsyncStub`` types each one as
    ``grpc.aio.UnaryUnaryMultiCallable[Request, Response]``, which fits this: a
    helper taking ``UnaryMethod[RequestT, ResponseT]`` and a ``RequestT`` checks
    the message against the method and answers the method's response type.
    """

    def __call__(
        self, request: _Request_contra, *, metadata: Metadata, timeout: float | None
    ) -> Awaitable[_Response_co]: ...


def open_channel(target: str, ca: Path | None, server_name: str = "") -> grpc.aio.Channel:
    """A channel to every replica ``target`` names, used in turn (round robin): plaintext
    on loopback, else TLS trusting ``ca`` (``tls``) and expecting the certificate of
    ``server_name`` when given (a replica reached by the address its name resolved to),
    of a list's first address otherwise (``checked_name_options``)."""
    credentials = channel_credentials(target, ca)
    if credentials is None:
        return grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS)
    options = CHANNEL_OPTIONS + checked_name_options(target, server_name)
    return grpc.aio.secure_channel(target, credentials, options=options)


async def credential_accepted(
    channel: grpc.aio.Channel, metadata: Metadata, timeout: float
) -> bool | None:
    """Whether the service behind ``channel`` accepts the credential in ``metadata``; None
    when it did not say (unreachable, still starting). Calls its reflection service, which
    needs a valid credential and nothing else (no scope, no database), asking nothing: a
    request written while a refusing server ends the call can fail it INTERNAL."""
    call = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
        metadata=metadata, timeout=timeout
    )
    # It may have ended already (refused, unreachable): then its status says how.
    with contextlib.suppress(Exception):
        await call.done_writing()
    code = await call.code()
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return False
    return True if code == grpc.StatusCode.OK else None


class ServiceCaller:
    """Holds one process's service key and the credential it signs, renewed well before
    it expires."""

    def __init__(
        self,
        key: SigningKey,
        *,
        ttl_seconds: int = DEFAULT_TTL_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._key = key
        self._ttl = ttl_seconds
        # Renew with a third of the lifetime left: a call in flight never carries a stale token.
        self._renew_margin = ttl_seconds / 3
        self._clock = clock
        self._token = ""
        self._renew_at = 0.0
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings, role: Role) -> ServiceCaller:
        """The caller with this process's key: ``OPS_SERVICE_KEY``, else ``role``'s key in
        ``OPS_SERVICE_KEYS_DIR``."""
        return cls(own_key(settings, role))

    @property
    def role(self) -> Role:
        return self._key.role

    @property
    def key(self) -> SigningKey:
        return self._key

    def token(self) -> str:
        with self._lock:
            now = self._clock()
            if now >= self._renew_at:
                self._token = mint_service_token(self._key, self._ttl)
                self._renew_at = now + self._ttl - self._renew_margin
            return self._token

    def metadata(self, owner_id: str | None = None) -> Metadata:
        """Call metadata: the credential, and ``x-owner-id`` for owner-scope calls."""
        credential = (AUTHORIZATION, f"Bearer {self.token()}")
        if owner_id is None:
            return (credential,)
        return (credential, (OWNER_ID, owner_id))
