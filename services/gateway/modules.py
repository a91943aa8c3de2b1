"""The route-module contract every part of the HTTP API follows.

A route module is a Python module (or any object) with three attributes:

* ``routes``: Starlette routes, e.g. ``[Route("/api/jobs", create_job, methods=["POST"])]``;
* ``openapi_paths``: the OpenAPI path items of those routes, written next to
  them with the helpers of ``durable_ops.gateway.openapi``;
* ``openapi_schemas``: component schemas those paths ``$ref`` (may be empty).

``create_app(settings, backends, modules=[...])`` mounts each module's routes
and merges its paths and schemas into ``/openapi.json``. ``RouteSet`` is the
same contract as a value, for modules built at run time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from starlette.routing import BaseRoute


class RouteModule(Protocol):
    @property
    def routes(self) -> Sequence[BaseRoute]: ...

    @property
    def openapi_paths(self) -> Mapping[str, Mapping[str, Any]]: ...

    @property
    def openapi_schemas(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class RouteSet:
    routes: Sequence[BaseRoute]
    openapi_paths: Mapping[str, Mapping[str, Any]]
    openapi_schemas: Mapping[str, Any]
