"""How a handler says its work did not finish. Pure.

A handler raises ``PermanentFailure`` for work that cannot succeed (the
operation fails now), ``RetryableFailure`` for work that may succeed later
(another attempt, while attempts are left), ``ExternalFallback`` when the local
route cannot serve it and the operation may wait for an external-route worker.
Any other exception counts as retryable under ``HANDLER_ERROR``, named by its
type only: its text may quote user content, and failure messages are stored.
A worker may map exceptions its own way (``Worker(classify=...)``).

Two refusals are not failures: ``LeaseLost`` raised by the handler (a write
fenced on the lease was refused) means the work is no longer this worker's;
with code ``cancel_requested`` it means the owner cancelled first, and the
worker acknowledges the cancel.
"""

from __future__ import annotations

from durable_ops.model import bounds
from durable_ops.model.provenance import Provenance

HANDLER_ERROR = "handler_error"
WORKER_SHUTDOWN = "worker_shutdown"


class HandlerFailure(Exception):
    """A failure the handler names: a stable ``code`` (≤ 64) and a stored ``message`` (≤ 512).

    ``provenance`` names the model that answered, when one did (it is stored on
    the operation as a completion's would be).
    """

    retryable = True

    def __init__(
        self, code: str, message: str = "", *, provenance: Provenance | None = None
    ) -> None:
        bounds.failure(code, message)
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message
        self.provenance = provenance


class RetryableFailure(HandlerFailure):
    """Try again later: the operation waits for its retry delay, if attempts are left."""


class PermanentFailure(HandlerFailure):
    """Do not try again: the operation fails now."""

    retryable = False


class WorkerShutdown(RetryableFailure):
    """The worker stopped before the attempt finished: another worker takes it at once."""

    def __init__(self) -> None:
        super().__init__(WORKER_SHUTDOWN, "the worker stopped before the attempt finished")


class ExternalFallback(Exception):
    """The local route cannot serve this attempt; an external-route worker may continue it.

    The operation waits for the external fallback (the same attempt, claimed
    again by a worker that names the external route); the service refuses this
    unless the task and the owner's privacy snapshot allow external routes.
    """

    def __init__(self, reason: str, *, provenance: Provenance | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.provenance = provenance


Settlement = HandlerFailure | ExternalFallback


def failure_of(error: Exception) -> Settlement:
    """What an exception a handler raised is stored as."""
    if isinstance(error, HandlerFailure | ExternalFallback):
        return error
    return RetryableFailure(HANDLER_ERROR, type(error).__name__[: bounds.FAILURE_MESSAGE_MAX])
