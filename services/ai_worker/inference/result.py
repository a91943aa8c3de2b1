"""What an inference returns: the validated answer and where it came from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from durable_ops.model.provenance import Provenance


@dataclass(frozen=True)
class InferenceResult:
    answer: dict[str, Any]
    provenance: Provenance
