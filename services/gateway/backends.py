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
from durable_ops.model.errors import DomainError, Unavailable
from durable_ops.model.scope import Role
from durable_ops.rpc.client import ServiceCaller, open_channel
from durable_ops.rpc.errors import domain_error_from_rpc
from durable_ops.rpc.tls import authority_of
from durable_ops.settings import Settings

DEFAULT_CALL_TIMEOUT_SECONDS = 10.0
HEALTH_TIMEOUT_SECONDS = 2.0

_log = structlog.get_logger(__name__)
# The backend refused the gateway's own credential: a deployment fault, not the user's.
_GATEWAY_CREDENTIAL_CODES = frozenset({"invalid_service_credential", "service_credential_required"})

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


def translate(exc: grpc.aio.AioRpcError) -> DomainError:
    """The domain error of a failed call; failures that are not the caller's are a 503."""
    error = domain_error_from_rpc(exc)
    if error.kind == "internal" or error.code in _GATEWAY_CREDENTIAL_CODES:
        _log.error("backend_call_failed", status=exc.code().name, code=error.code)
        return Unavailable("backend unavailable", code="backend_unavailable")
    return error


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
        # (backend, factory) -> factory(that backend's channel); see ``stub``.
        self._stubs: dict[tuple[str, StubFactory[object]], object] = {}

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

    def channel(self, name: str) -> grpc.aio.Channel:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            # A new loop (tests run several): channels of the old one cannot be used here.
            self._loop = loop
            self._channels = {}
            self._stubs = {}
        channel = self._channels.get(name)
        if channel is None:
            channel = open_channel(self.specs[name].target, self.ca)
            self._channels[name] = channel
        return channel

    def stub(self, name: str, factory: StubFactory[StubT]) -> StubT:
        """A generated stub (``factory`` is its class) bound to the channel of ``name``.

        Built once per backend and factory (a stub builds one callable per method).
        Typed as ``factory`` builds it: on a ``grpc.aio`` channel the generated
        ``...Stub`` class gives its ``...AsyncStub`` (awaitable, typed methods) once
        grpc's own types (types-grpcio) are installed; without them its methods are Any.
        """
        channel = self.channel(name)
        key = (name, factory)
        cached = self._stubs.get(key)
        if cached is not None:
            # The cache holds what ``factory`` built under this very key: its StubT.
            return cast(StubT, cached)
        stub = factory(channel)
        self._stubs[key] = stub
        return stub

    async def health(self) -> dict[str, str]:
        """``serving`` or why not, for each backend, asked concurrently."""
        names = list(self.specs)
        answers = await asyncio.gather(*(self._check(name) for name in names))
        return dict(zip(names, answers, strict=True))

    async def _check(self, name: str) -> str:
        health = health_pb2_grpc.HealthStub(self.channel(name))
        request = health_pb2.HealthCheckRequest(service=self.specs[name].health_service)
        try:
            reply = await health.Check(request, timeout=HEALTH_TIMEOUT_SECONDS)
        except grpc.aio.AioRpcError as exc:
            return "unreachable" if exc.code() != grpc.StatusCode.NOT_FOUND else "unknown_service"
        if reply.status == health_pb2.HealthCheckResponse.SERVING:
            return "serving"
        return "not_serving"

    async def close(self) -> None:
        channels, self._channels, self._stubs = list(self._channels.values()), {}, {}
        for channel in channels:
            with contextlib.suppress(Exception):
                await channel.close()
