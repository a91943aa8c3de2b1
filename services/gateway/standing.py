"""A bearer token's revocation check, asked beside a read rather than before it (figure 4).

A read with a bearer token needs two answers from behind the gateway: whether the
token still stands (``sessions.check_token``: a Workspace RPC, one primary-key read)
and the data it asks for. Asked one after the other they made a ``GET`` cost 2.1 times a
direct gRPC call (3.5 ms against 1.7 ms p50, figure 4's target is 2.0); asked side
by side, the check costs little more than the wait for the slower of the two.

Nothing of the answer leaves before the check has passed:

- ``OwnerCalls`` hands back no reply before it (``passed``), and drops its call when
  the check refuses, so a refused long-poll ends at once;
- ``CheckBeforeAnswering`` holds the start of every response until it has passed and
  answers the refusal instead (401, or 503 when the Workspace cannot be asked): an
  answer a route makes without a backend (a 404 for a malformed id) waits too.

Only safe methods defer (``auth.SAFE_METHODS``): a change is sent only once its
credential is known to stand. A session cookie cannot defer: its owner is what the
check answers.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Coroutine
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from durable_ops.gateway.problems import Problem, problem_from_domain
from durable_ops.model.errors import DomainError

_CHECK = "durable_ops.credential_check"  # the request's deferred check, in its ASGI scope

Check = asyncio.Future[None]
T = TypeVar("T")


def defer(request: Request, check: Coroutine[Any, Any, None]) -> Check:
    """Start ``check`` and make the request's answer wait for it."""
    task = beside(check)
    request.scope[_CHECK] = task
    return task


def beside(work: Awaitable[T]) -> asyncio.Future[T]:
    """``work`` started as a task whose failure, when nobody waits for it any more, is not
    reported again: a refused request's answer is its refusal."""
    task = asyncio.ensure_future(work)
    task.add_done_callback(lambda done: done.cancelled() or done.exception())
    return task


async def passed(check: Check) -> None:
    """Return once ``check`` has passed; raise its refusal otherwise.

    Shielded: a caller that stops waiting (a client gone) leaves the check to finish
    for the others.
    """
    await asyncio.shield(check)


async def _refusal(check: Check) -> Problem | None:
    try:
        await passed(check)
    except Problem as problem:
        return problem
    except DomainError as error:
        return problem_from_domain(error)
    return None


class _Refused(Exception):
    """The refusal is answered: the route's own answer is dropped."""


class CheckBeforeAnswering:
    """Holds a response's start until the request's deferred check has passed."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_when_checked(message: Message) -> None:
            check = scope.get(_CHECK)
            if message["type"] == "http.response.start" and check is not None:
                refusal = await _refusal(check)
                if refusal is not None:
                    await refusal.response()(scope, receive, send)
                    raise _Refused
            await send(message)

        with contextlib.suppress(_Refused):
            await self.app(scope, receive, send_when_checked)
