"""A task's answer schema, checked and put into words. Pure.

The schemas (``model.tasks``) use a small JSON-schema subset; ``validate``
enforces exactly that subset, strictly, whatever route produced the answer.
Messages name the place of a mismatch, never the offending value: it is
model output and may quote the user's CV. ``describe`` states the same
subset's limits in words for the prompt, so the prompt can never promise
limits other than those the answer is held to.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


class AnswerMismatch(ValueError):
    """The answer does not have the shape its schema demands."""


_SUPPORTED_KEYWORDS = frozenset(
    {
        "$schema",  # annotations: they constrain nothing
        "title",
        "description",
        "type",
        "additionalProperties",
        "required",
        "properties",
        "items",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "maxItems",
        "anyOf",
    }
)


def _not_json(constant: str) -> None:
    raise ValueError(f"{constant} is not JSON")


def published(body_json: str) -> dict[str, Any]:
    """A result's text as it may be kept and shown: JSON of an object, without NaN or
    Infinity (Python reads them; JSON, and so the page that shows the result, has no such
    number). Its shape is the worker's to check (``validate``): it made the answer."""
    try:
        data = json.loads(body_json, parse_constant=_not_json)
    except ValueError:
        raise AnswerMismatch("answer: is not JSON") from None
    if not isinstance(data, dict):
        raise AnswerMismatch("answer: expected an object")
    return data


def validate(schema: Mapping[str, Any], data: object) -> dict[str, Any]:
    """``data`` if it matches ``schema`` exactly, else ``AnswerMismatch``."""
    if not isinstance(data, dict):
        raise AnswerMismatch("answer: expected an object")
    _check(schema, data, "answer")
    return data


def _check(schema: Mapping[str, Any], value: object, where: str) -> None:
    unsupported = set(schema) - _SUPPORTED_KEYWORDS
    if unsupported:
        raise ValueError(f"schema keywords not supported: {sorted(unsupported)}")
    if "anyOf" in schema:
        # {anyOf: [X, {type: null}]}, the one union of this subset: a value the answer
        # may leave null, e.g. a score that could not be given ("not scored"). Written
        # as anyOf, not a type list, so a grammar-constrained model keeps X's bounds.
        branches = schema["anyOf"]
        if len(branches) != 2 or branches[1] != {"type": "null"} or "anyOf" in branches[0]:
            raise ValueError(f"schema union not supported: {branches!r}")
        if value is None:
            return
        _check(branches[0], value, where)
        return
    kind = schema["type"]
    if kind == "object":
        _check_object(schema, value, where)
    elif kind == "array":
        if not isinstance(value, list):
            raise AnswerMismatch(f"{where}: expected an array")
        if len(value) > schema.get("maxItems", len(value)):
            raise AnswerMismatch(f"{where}: more than {schema['maxItems']} items")
        for index, item in enumerate(value):
            _check(schema["items"], item, f"{where}[{index}]")
    elif kind == "string":
        if not isinstance(value, str):
            raise AnswerMismatch(f"{where}: expected a string")
        if len(value) < schema.get("minLength", 0):
            raise AnswerMismatch(f"{where}: shorter than {schema['minLength']} characters")
        if len(value) > schema.get("maxLength", len(value)):
            raise AnswerMismatch(f"{where}: longer than {schema['maxLength']} characters")
    elif kind == "integer":
        # bool is an int in Python but not in JSON; 3.0 is not an integer answer.
        if isinstance(value, bool) or not isinstance(value, int):
            raise AnswerMismatch(f"{where}: expected an integer")
        if not schema.get("minimum", value) <= value <= schema.get("maximum", value):
            raise AnswerMismatch(
                f"{where}: outside {schema.get('minimum')}..{schema.get('maximum')}"
            )
    else:
        raise ValueError(f"schema type not supported: {kind!r}")


def _check_object(schema: Mapping[str, Any], value: object, where: str) -> None:
    if not isinstance(value, dict):
        raise AnswerMismatch(f"{where}: expected an object")
    properties: Mapping[str, Any] = schema.get("properties", {})
    missing = [name for name in schema.get("required", []) if name not in value]
    if missing:
        raise AnswerMismatch(f"{where}: missing {', '.join(missing)}")
    if schema.get("additionalProperties", True) is False:
        extra = sorted(name for name in value if name not in properties)
        if extra:
            # Names only, bounded: they come from the model.
            shown = ", ".join(name[:40] for name in extra[:5])
            raise AnswerMismatch(f"{where}: unexpected properties {shown}")
    for name, property_schema in properties.items():
        if name in value:
            _check(property_schema, value[name], f"{where}.{name}")


def describe(schema: Mapping[str, Any]) -> str:
    """An object schema's fields and their limits, in words, e.g.

    ``fit_score (integer 0-100, or null), summary (at most 600 characters), strengths and
    gaps (each at most 6 items of at most 200 characters)``

    Neighbouring fields with the same limits are named together, as a person would.
    """
    groups: list[tuple[list[str], str]] = []
    for name, property_schema in schema.get("properties", {}).items():
        limits = _limits(property_schema)
        if groups and groups[-1][1] == limits:
            groups[-1][0].append(name)
        else:
            groups.append(([name], limits))
    return ", ".join(_fields_with(names, limits) for names, limits in groups)


def _fields_with(names: list[str], limits: str) -> str:
    if len(names) == 1:
        return f"{names[0]} ({limits})"
    return f"{', '.join(names[:-1])} and {names[-1]} (each {limits})"


def _limits(schema: Mapping[str, Any]) -> str:
    if "anyOf" in schema:  # {anyOf: [X, {type: null}]}, the subset's one union
        return f"{_limits(schema['anyOf'][0])}, or null"
    kind = schema["type"]
    if kind == "integer":
        low, high = schema.get("minimum"), schema.get("maximum")
        if low is not None and high is not None:
            return f"integer {low}-{high}"
        if low is not None:
            return f"integer of at least {low}"
        return "integer" if high is None else f"integer of at most {high}"
    if kind == "string":
        return f"at most {schema['maxLength']} characters" if "maxLength" in schema else "text"
    if kind == "array":
        count = f"at most {schema['maxItems']}" if "maxItems" in schema else "any number of"
        return f"{count} items of {_limits(schema['items'])}"
    if kind == "object":
        return f"an object of {describe(schema)}"
    if kind == "null":
        return "null"
    raise ValueError(f"schema type not supported: {kind!r}")
