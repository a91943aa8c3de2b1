"""Model inference for the AI worker: an OpenAI-compatible client that streams
the answer and reports its progress (framing in ``sse``), local-first routing
with a circuit breaker, and the errors that say whether to retry (the tree is
documented in ``durable_ops.ai_worker.inference.errors``).
"""

from durable_ops.ai_worker.inference.client import ModelClient, provider_from_url
from durable_ops.ai_worker.inference.errors import (
    ExternalRouteNotPermitted,
    InferenceError,
    InvalidModelOutput,
    LocalRouteUnavailable,
    ModelConnectionError,
    ModelRateLimited,
    ModelRequestRejected,
    ModelServerError,
    ModelTimeout,
    ModelUnavailable,
)
from durable_ops.ai_worker.inference.metrics import LOCAL_CIRCUIT_STATE
from durable_ops.ai_worker.inference.request import AnswerValidator, InferenceRequest
from durable_ops.ai_worker.inference.result import InferenceResult
from durable_ops.ai_worker.inference.router import Router
from durable_ops.model.provenance import Provenance

__all__ = [
    "LOCAL_CIRCUIT_STATE",
    "AnswerValidator",
    "ExternalRouteNotPermitted",
    "InferenceError",
    "InferenceRequest",
    "InferenceResult",
    "InvalidModelOutput",
    "LocalRouteUnavailable",
    "ModelClient",
    "ModelConnectionError",
    "ModelRateLimited",
    "ModelRequestRejected",
    "ModelServerError",
    "ModelTimeout",
    "ModelUnavailable",
    "Provenance",
    "Router",
    "provider_from_url",
]
