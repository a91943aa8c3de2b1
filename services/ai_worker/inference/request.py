"""One structured chat-completion request, independent of the route that serves it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

AnswerValidator = Callable[[dict[str, Any]], dict[str, Any]]
"""Checks a parsed answer; raises ``InvalidModelOutput`` when it does not fit."""


@dataclass(frozen=True)
class InferenceRequest:
    schema_name: str  # OpenAI allows [A-Za-z0-9_-], at most 64 characters
    schema: Mapping[str, Any]
    messages: Sequence[Mapping[str, str]]
    validate: AnswerValidator | None = field(default=None, compare=False)
    max_tokens: int | None = None  # a hard cap sent to the model
    expected_tokens: int | None = None  # how long an answer usually is: the progress budget
