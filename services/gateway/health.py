"""``/healthz`` (the process answers) and ``/readyz`` (every backend reports SERVING and
accepts the gateway's service credential).

``/readyz`` asks each backend's standard gRPC health service for its own
service name, then whether it accepts the gateway's credential
(``Backends.health``); when any is not serving, or refuses it
(``service_credential_refused``), it answers 503 problem details whose
``backends`` member says which. A backend is not serving while it waits for
its database at start or while its database does not answer (each backend
caches that answer for a second, ``durable_ops.storage.availability``), so
``/readyz`` follows the databases without touching one itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from durable_ops.gateway.backends import SERVICE_CREDENTIAL_REFUSED
from durable_ops.gateway.context import backends_of
from durable_ops.gateway.openapi import endpoint, errors, ok, ref
from durable_ops.gateway.problems import Problem


async def healthz(_request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    states = await backends_of(request).health()
    down = sorted(name for name, state in states.items() if state != "serving")
    if down:
        said = ", ".join(f"{name} ({states[name]})" for name in down)
        raise Problem(503, "not_ready", f"not serving: {said}", extra={"backends": states})
    return JSONResponse({"status": "ready", "backends": states})


routes: Sequence[BaseRoute] = [
    Route("/healthz", healthz, methods=["GET"]),
    Route("/readyz", readyz, methods=["GET"]),
]

_BACKEND_STATES = {
    "type": "object",
    "additionalProperties": {
        "type": "string",
        "enum": [
            "serving",
            "not_serving",
            "unreachable",
            "unknown_service",
            SERVICE_CREDENTIAL_REFUSED,
        ],
    },
}
openapi_schemas: Mapping[str, Any] = {
    "Health": {
        "type": "object",
        "required": ["status"],
        "properties": {"status": {"const": "ok"}},
    },
    "Readiness": {
        "type": "object",
        "required": ["status", "backends"],
        "properties": {"status": {"const": "ready"}, "backends": _BACKEND_STATES},
    },
}
openapi_paths: Mapping[str, Mapping[str, Any]] = {
    "/healthz": {
        "get": endpoint(
            "Liveness: the process answers",
            "getHealth",
            "meta",
            {"200": ok("alive", ref("Health"))},
            secured=False,
        )
    },
    "/readyz": {
        "get": endpoint(
            "Readiness: every backend's gRPC health service reports SERVING and the backend"
            " accepts the gateway's service credential",
            "getReadiness",
            "meta",
            {
                "200": ok("ready", ref("Readiness")),
                **errors(503),
            },
            secured=False,
        )
    },
}
