"""Container health check for durable-ops processes; exit 0 when healthy, 1 when not.

    python /opt/durable-ops/deploy/healthcheck.py grpc 127.0.0.1:50051 [SERVICE] [--ca FILE]
    python /opt/durable-ops/deploy/healthcheck.py http http://127.0.0.1:8080/readyz

``grpc`` asks the standard gRPC health service (``grpc.health.v1.Health/Check``)
for ``SERVICE`` (default ``""``, the whole server) and wants ``SERVING``: a
server that is draining on SIGTERM reports ``NOT_SERVING`` and fails the check.
``--ca`` speaks TLS, trusting that certificate (a service bound beyond loopback
serves TLS only). ``http`` wants a 2xx answer. The image ships no ``grpc_health_probe``; this
script needs only grpcio, grpcio-health-checking (runtime dependencies of the
package) and the standard library, and never imports the application.
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
from collections.abc import Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

TIMEOUT_SECONDS = 3.0
USAGE = "usage: healthcheck.py grpc HOST:PORT [SERVICE] [--ca FILE] | healthcheck.py http URL"


def check_grpc(
    target: str, service: str = "", timeout: float = TIMEOUT_SECONDS, ca: bytes | None = None
) -> str | None:
    """``None`` when ``target`` reports SERVING for ``service``, else why not; over TLS
    trusting ``ca`` when given."""
    channel = (
        grpc.secure_channel(target, grpc.ssl_channel_credentials(ca))
        if ca is not None
        else grpc.insecure_channel(target)
    )
    with channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout
            )
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else None
            return f"{target}: health check failed ({code.name if code else exc})"
    if reply.status != health_pb2.HealthCheckResponse.SERVING:
        status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
        return f"{target}: {service or 'server'} is {status}"
    return None


def check_http(url: str, timeout: float = TIMEOUT_SECONDS) -> str | None:
    """``None`` when ``url`` answers 2xx, else why not."""
    if not url.startswith(("http://", "https://")):
        return f"{url}: not an http(s) URL"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310
            status = int(response.status)
    except urllib.error.HTTPError as exc:
        return f"{url}: HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        return f"{url}: {exc}"
    return None if 200 <= status < 300 else f"{url}: HTTP {status}"


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    ca = None
    if "--ca" in args[:-1]:
        at = args.index("--ca")
        try:
            with open(args[at + 1], "rb") as file:
                ca = file.read()
        except OSError as exc:
            print(f"unhealthy: {exc}", file=sys.stderr)
            return 1
        del args[at : at + 2]
    if len(args) == 2 and args[0] == "http" and ca is None:
        problem = check_http(args[1])
    elif len(args) in (2, 3) and args[0] == "grpc":
        problem = check_grpc(args[1], args[2] if len(args) == 3 else "", ca=ca)
    else:
        print(USAGE, file=sys.stderr)
        return 1  # Docker reserves exit status 2
    if problem is not None:
        print(f"unhealthy: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
