"""The names the gateway answers to, and whether it may serve dev-login.

A DNS-rebinding page reaches a local gateway under the attacker's host name:
``AllowedHostsMiddleware`` refuses every request whose ``Host`` is not in
``allowed_hosts`` (400 ``host_not_allowed``) before any route runs, so the
same-origin checks, which compare ``Origin`` with ``Host``, only ever see a
name the operator chose. The probes (``/healthz``, ``/readyz``) are left
open: they carry no user's data and are addressed by whatever name an
orchestrator uses for the container.

Dev-login signs anyone in, so it is served only while the gateway listens on
loopback alone (``dev_login_refusal`` says why not otherwise).
"""

from __future__ import annotations

import re

from starlette.types import ASGIApp, Receive, Scope, Send

from durable_ops.gateway.problems import Problem
from durable_ops.model.addresses import is_loopback
from durable_ops.settings import Settings, SettingsError

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})  # noqa: S104
UNCHECKED_PATHS = frozenset({"/healthz", "/readyz"})


def parse_bind(bind: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:8080`` for IPv6) -> (host, port)."""
    host, sep, port = bind.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise SettingsError(f"OPS_GATEWAY_BIND must be host:port, not {bind!r}")
    return host.strip("[]"), int(port)


def allowed_hosts(settings: Settings) -> frozenset[str]:
    """OPS_GATEWAY_ALLOWED_HOSTS, or the loopback names and the bind's own host."""
    configured = settings.gateway_allowed_host_names
    if configured:
        return frozenset(configured)
    host, _port = parse_bind(settings.gateway_bind)
    names = set(LOOPBACK_NAMES)
    if host not in WILDCARD_HOSTS:
        names.add(f"[{host}]" if ":" in host else host.lower())
    return frozenset(names)


def dev_login_refusal(settings: Settings) -> str | None:
    """Why dev-login is not served although OPS_DEV_LOGIN asks for it; ``None`` otherwise."""
    host, _port = parse_bind(settings.gateway_bind)
    if not settings.dev_login or is_loopback(host):
        return None
    return (
        f"dev-login is off: OPS_DEV_LOGIN is set but the gateway listens on"
        f" {settings.gateway_bind} (OPS_GATEWAY_BIND), not on loopback only, and dev-login"
        " would let anyone who reaches it sign in as anyone; sign in with a token from"
        " `opsctl token` instead"
    )


def serves_dev_login(settings: Settings) -> bool:
    return settings.dev_login and dev_login_refusal(settings) is None


# A host name or a bracketed IPv6 address, then at most a port of digits.
_HOST = re.compile(r"(?P<name>\[[^\]]*\]|[^:\[\]]*)(?::[0-9]{1,5})?")


def host_name(header: str) -> str:
    """The ``Host`` header without its port, lower case: ``[::1]:8080`` -> ``[::1]``; ""
    when it is no name and port (``localhost:abc``), which no allowed name is."""
    found = _HOST.fullmatch(header.strip().lower())
    return found["name"] if found else ""


class AllowedHostsMiddleware:
    def __init__(self, app: ASGIApp, hosts: frozenset[str]) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The gateway serves HTTP only (no WebSocket route): lifespan passes through.
        if scope["type"] != "http" or scope["path"] in UNCHECKED_PATHS:
            await self.app(scope, receive, send)
            return
        headers = [value for name, value in scope["headers"] if name == b"host"]
        if len(headers) == 1 and host_name(headers[0].decode("latin-1")) in self.hosts:
            await self.app(scope, receive, send)
            return
        refusal = Problem(
            400,
            "host_not_allowed",
            "this gateway does not answer to the host name in the Host header;"
            " its operator lists the names it does in OPS_GATEWAY_ALLOWED_HOSTS",
        )
        await refusal.response()(scope, receive, send)
