"""How a handler's work ends. Pure.

A handler returns a result reference or ``Completed`` (with the provenance of
the model that made it); it raises ``PermanentFailure`` for work that cannot
succeed, ``RetryableFailure`` for work that may succeed later (while attempts
are left; no sooner than its ``retry_after``, if it names one), ``ExternalFallback``
when the local route cannot serve it and an external-route worker may. Any other
exception counts as retryable under ``HANDLER_ERROR``, named by its type only: its
text may quote user content, and failure messages are stored. ``LeaseLost`` is no
failure: the work is no longer this worker's (with code ``cancel_requested``: the
owner cancelled first).

A call of the SDK's own API that breaks its bounds (a progress past 100, a failure
code outside its alphabet) raises ``InvalidHandlerCall`` in the handler. Unless the
handler catches it, the attempt fails at once, for good, under ``INVALID_HANDLER_CALL``
with that error's message, whatever ``classify`` says: the same handler would call it
so again, and the SDK's wording quotes no user content.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

from durable_ops.model import bounds
from durable_ops.model.errors import InvalidArgument
from durable_ops.model.provenance import Provenance as ModelProvenance

HANDLER_ERROR = "handler_error"
INVALID_RESULT = "invalid_result"  # what the handler returned no completion can carry
INVALID_HANDLER_CALL = "invalid_handler_call"  # the handler called the SDK out of its bounds
# The services keep a reference to the result, never the result: as long as a subject id.
RESULT_REF_MAX = bounds.SUBJECT_ID_MAX


@dataclass(frozen=True)
class Provenance(ModelProvenance):
    """Which model answered (provider, model, route: each 1 to its column's length), as a
    handler reports it; out of those bounds it is an ``InvalidHandlerCall``, as every other
    value a handler hands the SDK is, not a ``ValueError`` retried as ``handler_error``."""

    def __post_init__(self) -> None:
        try:
            super().__post_init__()
        except ValueError as error:
            raise InvalidHandlerCall("provenance", str(error)) from None


@dataclass(frozen=True)
class Completed:
    """A handler's finished work: the result's reference and, optionally, its provenance."""

    result_ref: str = ""
    provenance: ModelProvenance | None = None


def completed(returned: object) -> Completed | PermanentFailure:
    """A handler's return value as a completion (a string is the result's reference), or,
    for a value no completion can carry (not a string, too long a reference), a permanent
    ``INVALID_RESULT`` failure: the same handler would return it again."""
    if returned is None or isinstance(returned, str):
        returned = Completed(returned or "")
    if not isinstance(returned, Completed) or not isinstance(returned.result_ref, str):
        kind = type(returned).__name__
        return PermanentFailure(INVALID_RESULT, f"the handler returned a {kind}, not a str")
    if len(returned.result_ref) > RESULT_REF_MAX:
        return PermanentFailure(
            INVALID_RESULT,
            f"the result reference is {len(returned.result_ref)} characters,"
            f" at most {RESULT_REF_MAX}: return a reference to the result, not the result",
        )
    return returned


class InvalidHandlerCall(InvalidArgument):
    """The handler called the SDK out of its bounds; raised by the SDK alone, so that the
    message is the SDK's own (the module's docstring)."""

    code = INVALID_HANDLER_CALL

    def failure(self) -> PermanentFailure:
        """What the attempt fails as: the same handler would make the same call again."""
        return PermanentFailure(INVALID_HANDLER_CALL, self.message[: bounds.FAILURE_MESSAGE_MAX])


@contextmanager
def handler_call() -> Iterator[None]:
    """Around the SDK's check of what a handler passed it: a bound it breaks is raised as
    ``InvalidHandlerCall``, not as the plain ``InvalidArgument`` a handler's own code may
    raise (which may quote user content)."""
    try:
        yield
    except InvalidArgument as error:
        raise InvalidHandlerCall(error.field, error.reason) from None


class HandlerFailure(Exception):
    """A failure the handler names: a stable ``code`` (≤ 64 of ``a-z0-9._-``: the owner sees
    it), a stored ``message`` (≤ 512) and the ``provenance`` of the model that answered, if
    one did. Beyond those, ``InvalidHandlerCall`` is raised here, in the handler."""

    retryable = True
    retry_after: timedelta | None = None  # only a ``RetryableFailure`` names one

    def __init__(
        self, code: str, message: str = "", *, provenance: ModelProvenance | None = None
    ) -> None:
        with handler_call():
            bounds.failure(code, message)
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message
        self.provenance = provenance


class RetryableFailure(HandlerFailure):
    """Try again later: the operation waits for its retry delay, if attempts are left.

    ``retry_after`` (1 s to a day, else ``InvalidHandlerCall``) is the earliest the next
    attempt may start, from the failure: what a model provider's Retry-After said. The
    retry waits for the later of it and the retry delay; if that reaches the operation's
    deadline, the retry is pointless and the operation fails now, under this ``code``.
    """

    def __init__(
        self,
        code: str,
        message: str = "",
        *,
        provenance: ModelProvenance | None = None,
        retry_after: timedelta | None = None,
    ) -> None:
        if retry_after is not None:
            with handler_call():
                bounds.retry_after(retry_after)
        super().__init__(code, message, provenance=provenance)
        self.retry_after = retry_after


class PermanentFailure(HandlerFailure):
    """Do not try again: the operation fails now."""

    retryable = False


class WorkerShutdown(Exception):
    """The worker stopped before the attempt finished: it is released, not failed. The
    operation is queued again at once with its progress, and the attempt is not spent."""

    def __init__(self) -> None:
        super().__init__("the worker stopped before the attempt finished")


class ExternalFallback(Exception):
    """The local route cannot serve this attempt: the operation waits for a worker naming
    the external route (the service refuses unless the task and the owner allow it)."""

    def __init__(self, reason: str, *, provenance: ModelProvenance | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.provenance = provenance


Settlement = HandlerFailure | ExternalFallback


def failure_of(error: Exception) -> Settlement:
    """What an exception a handler raised is stored as (``Worker(classify=...)`` by default;
    an ``InvalidHandlerCall`` is settled before any ``classify`` sees it)."""
    if isinstance(error, HandlerFailure | ExternalFallback):
        return error
    return RetryableFailure(HANDLER_ERROR, type(error).__name__[: bounds.FAILURE_MESSAGE_MAX])
