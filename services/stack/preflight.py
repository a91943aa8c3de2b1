"""Is every address free before the first child starts?

gRPC servers bind with SO_REUSEPORT, so a second ``opsctl up`` would share
the first one's ports and half its requests would reach the wrong stack;
a probe without SO_REUSEPORT sees such a listener as taken. SO_REUSEADDR
keeps the sockets of a stack that just stopped (TIME_WAIT) from counting.
"""

from __future__ import annotations

import socket

from durable_ops.model.addresses import is_loopback
from durable_ops.stack.binds import Bind, clashes


def in_use(bind: Bind) -> bool:
    try:
        infos = socket.getaddrinfo(bind.host, bind.port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return False  # the child reports an unknown host in its own words
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError:
            return True
    return False


GRPC_BINDS = ("operations_bind", "notifications_bind", "workspace_bind", "ai_admission_bind")


def problems(binds: list[Bind]) -> list[str]:
    """One sentence per address that would stop the stack from starting."""
    found = [
        f"{second.variable} and {first.variable} both name {first.address}; "
        f"set one of them to another address."
        for first, second in clashes(binds)
    ]
    found += [
        f"{bind.variable} is {bind.address}, beyond loopback: opsctl up serves the gRPC"
        " services on loopback only (their clients are its children); serve them beyond it"
        " with `opsctl serve`, which speaks TLS there (docs/operations.md)."
        for bind in binds
        if bind.setting in GRPC_BINDS and not is_loopback(bind.host)
    ]
    found += [
        f"{bind.address} is already in use ({bind.variable}); stop what listens there, "
        f"set {bind.variable} to another address, or move every port with --port-base N."
        for bind in binds
        if in_use(bind)
    ]
    return found
