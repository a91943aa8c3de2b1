"""What the app keeps for its routes (``app.state``), read back with types.

``create_app`` stores the settings, the backends, the metrics, the page
renderer, the OpenAPI document, the in-memory bounds (``limits``) and the
stop's ``Draining`` on ``app.state``; routes read the settings, the backends,
the bounds and the stop through these accessors.
"""

from __future__ import annotations

from starlette.requests import Request

from durable_ops.gateway.backends import Backends
from durable_ops.gateway.limits import ConcurrencyLimit, Throttle
from durable_ops.gateway.stopping import Draining
from durable_ops.settings import Settings


def settings_of(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def backends_of(request: Request) -> Backends:
    backends: Backends = request.app.state.backends
    return backends


def long_polls_of(request: Request) -> ConcurrencyLimit:
    """The long-polls each user holds open in this process (OPS_GATEWAY_LONG_POLLS_PER_USER)."""
    long_polls: ConcurrencyLimit = request.app.state.long_polls
    return long_polls


def sign_in_throttle_of(request: Request) -> Throttle:
    """The sign-in attempts of each client address and user, in this process."""
    throttle: Throttle = request.app.state.sign_in_throttle
    return throttle


def draining_of(request: Request) -> Draining:
    """Whether this gateway is stopping: its streams and long-polls end (``stopping``)."""
    draining: Draining = request.app.state.draining
    return draining
