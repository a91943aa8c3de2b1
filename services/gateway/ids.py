"""Resource ids in paths: checked before any backend call.

Ids are opaque to clients (the services issue 32 hex characters). One that
could never have been issued gets the same 404 as a missing one, so a
malformed id, an unknown id and another user's id are indistinguishable.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.requests import Request

from durable_ops.model.bounds import could_be_id
from durable_ops.model.errors import NotFound


def resource_id(request: Request, not_found: Callable[[], NotFound], name: str = "id") -> str:
    value = str(request.path_params[name])
    if not could_be_id(value):
        raise not_found()
    return value
