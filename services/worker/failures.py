"""How a handler says its work failed. Pure.

A handler raises ``PermanentFailure`` for work that cannot succeed (the
operation fails now), ``RetryableFailure`` for work that may succeed later
(another attempt, while attempts are left). Any other exception counts as
retryable under ``HANDLER_ERROR``, named by its type only: its text may quote
user content, and failure messages are stored.
"""

from __future__ import annotations

from durable_ops.model import bounds

HANDLER_ERROR = "handler_error"
WORKER_SHUTDOWN = "worker_shutdown"


class HandlerFailure(Exception):
    """A failure the handler names: a stable ``code`` (≤ 64) and a stored ``message`` (≤ 512)."""

    retryable = True

    def __init__(self, code: str, message: str = "") -> None:
        bounds.failure(code, message)
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message


class RetryableFailure(HandlerFailure):
    """Try again later: the operation waits for its retry delay, if attempts are left."""


class PermanentFailure(HandlerFailure):
    """Do not try again: the operation fails now."""

    retryable = False


def failure_of(error: Exception) -> HandlerFailure:
    """What an exception a handler raised is stored as."""
    if isinstance(error, HandlerFailure):
        return error
    return RetryableFailure(HANDLER_ERROR, type(error).__name__[: bounds.FAILURE_MESSAGE_MAX])
