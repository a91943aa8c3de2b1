"""Resource ids in paths: checked before any backend call.

Ids are opaque to clients (the services issue 32 hex characters). One that
could never have been issued gets the same 404 as a missing one, so a
malformed id, an unknown id and another user's id are indistinguishable.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from starlette.requests import Request

from durable_ops.model.bounds import ID_MAX
from durable_ops.model.errors import NotFound

_ID = re.compile(r"[A-Za-z0-9_-]+")


def resource_id(request: Request, not_found: Callable[[], NotFound], name: str = "id") -> str:
    value = str(request.path_params[name])
    if len(value) > ID_MAX or not _ID.fullmatch(value):
        raise not_found()
    return value
