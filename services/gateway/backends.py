"""The gRPC services behind the gateway: one channel each, the gateway credential, health.

Channels are opened lazily inside the running event loop (a ``grpc.aio``
channel belongs to the loop that made it) and closed by the app's lifespan.
A route module reaches a service with ``backends.stub(name, StubClass)``;
the lead adds a backend by naming it in ``Backends.from_settings(..., names=)``
(or by passing a ``BackendSpec``).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar, cast

import grpc
import structlog
from grpc_health.v1 import health_pb2, health_pb2_grpc

from durable_ops.api.ai_admission.v1 import ai_admission_pb2
from durable_ops.api.notifications.v1 import notifications_pb2
from durable_ops.api.operations.v1 import operations_pb2
from durable_ops.api.workspace.v1 import workspace_pb2
from durable_ops.gateway.problems import BACKEND_UNAVAILABLE
from durable_ops.model.addresses import named_host, replica_targets
from durable_ops.model.errors import DomainError, Unavailable
from durable_ops.model.scope import Role
from durable_ops.rpc.client import ServiceCaller, credential_accepted, open_channel
from durable_ops.rpc.errors import ERROR_CODE, domain_error_from_rpc
from durable_ops.rpc.tls import authority_of
from durable_ops.settings import Settings

DEFAULT_CALL_TIMEOUT_SECONDS = 10.0
HEALTH_TIMEOUT_SECONDS = 2.0
# How long one answer of ``health`` serves every caller: /readyz is anonymous, and each
# check costs every backend two calls (an attacker's flood measured ~2 ms of the services'
# CPU per request, a core kept busy by one client); a second is well inside any probe's.
HEALTH_SHARED_SECONDS = 1.0
# How long the replicas a DNS name resolved to are used before it is resolved again: an
# event stream opened after a scale-up watches the new replica within it (figure 12).
RESOLVED_SECONDS = 10.0

_log = structlog.get_logger(__name__)
# The backend refused the gateway's own credential: a deployment fault, not the user's.
_GATEWAY_CREDENTIAL_CODES = frozenset({"invalid_service_credential", "service_credential_required"})
# A backend's state in ``health`` when it serves but refuses the gateway's own credential.
SERVICE_CREDENTIAL_REFUSED = "service_credential_refused"

StubT = TypeVar("StubT")
# A generated stub class, or anything else that builds a stub from a channel.
StubFactory = Callable[[grpc.aio.Channel], StubT]


@dataclass(frozen=True)
class BackendSpec:
    """Where a service lives and the name it reports in the standard health service."""

    name: str
    target: str
    health_service: str


# name -> (Settings field holding the target, full gRPC service name for health checks)
KNOWN_BACKENDS: Mapping[str, tuple[str, str]] = {
    "operations": (
        "operations_target",
        operations_pb2.DESCRIPTOR.services_by_name["OperationsService"].full_name,
    ),
    "notifications": (
        "notifications_target",
        notifications_pb2.DESCRIPTOR.services_by_name["NotificationsService"].full_name,
    ),
    "workspace": (
        "workspace_target",
        workspace_pb2.DESCRIPTOR.services_by_name["WorkspaceService"].full_name,
    ),
    "ai_admission": (
        "ai_admission_target",
        ai_admission_pb2.DESCRIPTOR.services_by_name["AiAdmissionService"].full_name,
    ),
}
DEFAULT_BACKENDS = ("operations", "notifications", "workspace", "ai_admission")


async def serving_state(
    channel: grpc.aio.Channel, health_service: str, timeout: float = HEALTH_TIMEOUT_SECONDS
) -> str:
    """What the standard health check of ``health_service`` behind ``channel`` says:
    ``serving``, ``not_serving``, ``unknown_service`` (the server serves no such service)
    or ``unreachable`` (no answer within ``timeout``). Needs no credential."""
    request = health_pb2.HealthCheckRequest(service=health_service)
    try:
        reply = await health_pb2_grpc.HealthStub(channel).Check(request, timeout=timeout)
    except grpc.aio.AioRpcError as exc:
        return "unreachable" if exc.code() != grpc.StatusCode.NOT_FOUND else "unknown_service"
    if reply.status != health_pb2.HealthCheckResponse.SERVING:
        return "not_serving"
    return "serving"


def translate(exc: grpc.aio.AioRpcError) -> DomainError:
    """The domain error of a failed call; failures that are not the caller's are a 503,
    and a service the call could not reach reads as one (``BACKEND_UNAVAILABLE``)."""
    error = domain_error_from_rpc(exc)
    if error.kind == "internal" or error.code in _GATEWAY_CREDENTIAL_CODES:
        _log.error("backend_call_failed", status=exc.code().name, code=error.code)
        return Unavailable(BACKEND_UNAVAILABLE, code="backend_unavailable")
    if exc.code() == grpc.StatusCode.UNAVAILABLE and not _worded_by_the_service(exc):
        # gRPC's own status (nothing listens, the connection broke), which the rebuilt
        # error words "remote call failed: unavailable": pages show the sentence instead.
        return Unavailable(BACKEND_UNAVAILABLE)
    return error


def _worded_by_the_service(exc: grpc.aio.AioRpcError) -> bool:
    """Whether the service itself answered with its error code (and its own words)."""
    return any(key == ERROR_CODE for key, _value in exc.trailing_metadata() or ())


def spec_from_settings(settings: Settings, name: str) -> BackendSpec:
    target_field, health_service = KNOWN_BACKENDS[name]
    return BackendSpec(name, str(getattr(settings, target_field)), health_service)


class Backends:
    """Channels, stubs and call metadata for the services the gateway talks to."""

    def __init__(
        self,
        caller: ServiceCaller,
        specs: Iterable[BackendSpec],
        *,
        call_timeout: float = DEFAULT_CALL_TIMEOUT_SECONDS,
        ca: Path | None = None,
    ) -> None:
        self.caller = caller
        self.ca = ca  # what TLS to a service beyond loopback trusts
        self.specs: dict[str, BackendSpec] = {spec.name: spec for spec in specs}
        self.call_timeout = call_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._channels: dict[str, grpc.aio.Channel] = {}
        # (backend or backend@replica, factory) -> factory(its channel); see ``stub``.
        self._stubs: dict[tuple[str, StubFactory[object]], object] = {}
        self._resolved: dict[str, tuple[float, list[str]]] = {}  # backend -> (when, replicas)
        self._server_names: dict[str, str] = {}  # a resolved replica -> the name it came from
        self._refusing: set[str] = set()  # backends that refused our credential when last asked
        self._health: tuple[float, asyncio.Task[dict[str, str]]] | None = None  # (began, check)

    @classmethod
    def from_settings(cls, settings: Settings, names: Sequence[str] = DEFAULT_BACKENDS) -> Backends:
        return cls(
            ServiceCaller.from_settings(settings, Role.GATEWAY),
            [spec_from_settings(settings, name) for name in names],
            ca=authority_of(settings.service_keys_dir),
        )

    def metadata(self, owner_id: str) -> tuple[tuple[str, str], ...]:
        """The gateway credential and the authenticated user as ``x-owner-id``."""
        return self.caller.metadata(owner_id)

    def channel(self, name: str, target: str | None = None) -> grpc.aio.Channel:
        """The channel to backend ``name``: to every replica in turn, or to the one
        ``target`` (one of ``replicas``)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            # A new loop (tests run several): channels of the old one cannot be used here.
            self._loop = loop
            self._channels = {}
            self._stubs = {}
        key = name if target is None else f"{name}@{target}"
        channel = self._channels.get(key)
        if channel is None:
            if target is None:
                channel = open_channel(self.specs[name].target, self.ca)
            else:
                channel = open_channel(target, self.ca, self._server_names.get(target, ""))
            self._channels[key] = channel
        return channel

    async def replicas(self, name: str) -> list[str]:
        """A target for each replica of backend ``name``: the addresses its target lists,
        or those its DNS name resolves to (IPv4; a Compose service scaled to several
        containers), again at most every ``RESOLVED_SECONDS``; the target itself when
        neither gives any."""
        target = self.specs[name].target
        named = named_host(target)
        if named is None:
            return replica_targets(target)
        host, port = named
        now = time.monotonic()
        resolved = self._resolved.get(name)
        if resolved is not None and now - resolved[0] < RESOLVED_SECONDS:
            return resolved[1]
        try:
            found = await asyncio.get_running_loop().getaddrinfo(
                host, port, family=socket.AF_INET, type=socket.SOCK_STREAM
            )
        except OSError:
            return [target]
        replicas = [f"ipv4:{address}:{port}" for address in sorted({info[4][0] for info in found})]
        for replica in replicas:
            self._server_names[replica] = host
        self._resolved[name] = (now, replicas or [target])
        return replicas or [target]

    def stub(self, name: str, factory: StubFactory[StubT], target: str | None = None) -> StubT:
        """A generated stub (``factory`` is its class) bound to the channel of ``name``.

        Built once per backend and factory (a stub builds one callable per method).
        Typed as ``factory`` builds it: on a ``grpc.aio`` channel the generated
        ``...Stub`` class gives its ``...AsyncStub`` (awaitable, typed methods) once
        grpc's own types (types-grpcio) are installed; without them its methods are Any.
        """
        channel = self.channel(name, target)
        key = (name if target is None else f"{name}@{target}", factory)
        cached = self._stubs.get(key)
        if cached is not None:
            # The cache holds what ``factory`` built under this very key: its StubT.
            return cast(StubT, cached)
        stub = factory(channel)
        self._stubs[key] = stub
        return stub

    async def health(self) -> dict[str, str]:
        """``serving`` or why not, for each backend, asked concurrently: its health service,
        then, since that needs no credential, whether it accepts the gateway's (a key from
        another keys folder, or revoked, fails every call while health says SERVING). One
        check serves every caller who asks while it runs and ``HEALTH_SHARED_SECONDS`` from
        its start."""
        now, shared = time.monotonic(), self._health
        if (
            shared is None
            or now - shared[0] >= HEALTH_SHARED_SECONDS
            or shared[1].get_loop() is not asyncio.get_running_loop()  # tests run several
        ):
            self._health = shared = (now, asyncio.ensure_future(self._check_all()))
        # A caller that goes away does not cancel the check the others wait on.
        return dict(await asyncio.shield(shared[1]))

    async def _check_all(self) -> dict[str, str]:
        names = list(self.specs)
        answers = await asyncio.gather(*(self._check(name) for name in names))
        return dict(zip(names, answers, strict=True))

    async def _check(self, name: str) -> str:
        channel = self.channel(name)
        state = await serving_state(channel, self.specs[name].health_service)
        if state != "serving":
            return state
        metadata = self.caller.metadata()
        if await credential_accepted(channel, metadata, HEALTH_TIMEOUT_SECONDS) is False:
            self._refused_by(name)
            return SERVICE_CREDENTIAL_REFUSED
        self._refusing.discard(name)
        return "serving"

    def _refused_by(self, name: str) -> None:
        """Said once while ``name`` goes on refusing: readiness is asked every few seconds."""
        if name in self._refusing:
            return
        self._refusing.add(name)
        key = self.caller.key
        where = key.path or key.name
        _log.error(
            SERVICE_CREDENTIAL_REFUSED,
            backend=name,
            target=self.specs[name].target,
            key=str(where),
            kid=key.kid,
            say=f"{name} refuses the gateway's service key {where} (kid {key.kid}): its public"
            " key is not among those the service trusts (a key from another keys folder, or"
            " a revoked one); give the gateway a key from the services' OPS_SERVICE_KEYS_DIR",
        )

    async def close(self) -> None:
        checking = self._health[1] if self._health is not None else None
        if checking is not None and checking.get_loop() is asyncio.get_running_loop():
            checking.cancel()
        channels, self._channels, self._stubs = list(self._channels.values()), {}, {}
        for channel in channels:
            with contextlib.suppress(Exception):
                await channel.close()
