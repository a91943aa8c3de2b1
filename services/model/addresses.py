"""Which addresses stay on this host: loopback binds and targets need no TLS (SPEC §2)."""

from __future__ import annotations

import ipaddress

# gRPC target schemes that name addresses (``ipv4:10.0.0.5:50051,10.0.0.6:50051``).
_SCHEMES = ("dns:///", "dns:", "ipv4:", "ipv6:")


def is_loopback(host: str) -> bool:
    """``localhost`` or an address in 127.0.0.0/8 or ::1; a wildcard or any other name is not."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def hosts_of(address: str) -> list[str]:
    """The hosts a bind or a gRPC target names: ``host:port``, ``[v6]:port``, or a target
    with a scheme and several addresses."""
    rest = address
    for scheme in _SCHEMES:
        if rest.startswith(scheme):
            rest = rest[len(scheme) :]
            break
    hosts = []
    for part in rest.split(","):
        host, sep, _port = part.rpartition(":")
        hosts.append((host if sep else part).strip("[]"))
    return hosts


def stays_on_this_host(address: str) -> bool:
    """Whether every host ``address`` names is loopback (so plaintext never leaves it)."""
    return all(is_loopback(host) for host in hosts_of(address))


def replica_targets(target: str) -> list[str]:
    """One target per replica that ``target`` lists (``ipv4:a:1,b:2`` → ``ipv4:a:1``,
    ``ipv4:b:2``); any other target is one (a DNS name is resolved by gRPC, replica
    unknown)."""
    for scheme in ("ipv4:", "ipv6:"):
        if target.startswith(scheme):
            parts = [part for part in target[len(scheme) :].split(",") if part]
            return [scheme + part for part in parts] or [target]
    return [target]


def first_listed_address(target: str) -> str | None:
    """The first address of a target that lists addresses (``ipv4:10.0.0.5:50051,10.0.0.6:50051``
    → ``10.0.0.5:50051``, ``ipv6:[fd00::5]:50051,…`` → ``[fd00::5]:50051``); None for any
    other target.

    What TLS checks the certificate against for such a target: left alone, gRPC checks the
    whole list as one host name (``10.0.0.5:50051,10.0.0.6:50051``), which no certificate
    holds. Every replica of a list presents the services' one certificate, which names
    every address (``opsctl keys init --tls-name``), so checking the first one on each
    connection still refuses a certificate made for other hosts.
    """
    for scheme in ("ipv4:", "ipv6:"):
        if target.startswith(scheme):
            first = target[len(scheme) :].split(",")[0]
            return first or None
    return None


def named_host(target: str) -> tuple[str, int] | None:
    """The DNS name and port of a target that names one host by name (``operations:50051``,
    ``dns:///operations:50051``): its replicas are the addresses it resolves to. None for
    address literals and lists."""
    rest = target
    for scheme in ("dns:///", "dns:"):
        if rest.startswith(scheme):
            rest = rest[len(scheme) :]
            break
    else:
        if rest.startswith(("ipv4:", "ipv6:", "unix:")):
            return None
    host, sep, port = rest.rpartition(":")
    if not sep or "," in rest or not port.isdigit() or not host or host.startswith("["):
        return None
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return host, int(port)
    return None
