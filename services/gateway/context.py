"""What the app keeps for its routes (``app.state``), read back with types.

``create_app`` stores the settings, the backends, the metrics, the page
renderer and the OpenAPI document on ``app.state``; routes read the first
two through these accessors.
"""

from __future__ import annotations

from starlette.requests import Request

from durable_ops.gateway.backends import Backends
from durable_ops.settings import Settings


def settings_of(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def backends_of(request: Request) -> Backends:
    backends: Backends = request.app.state.backends
    return backends
