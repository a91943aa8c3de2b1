"""Reading the type of one property of a sent answer schema. Pure.

A property has one ``type`` ("integer") or, where a value may be left null,
is ``{"anyOf": [{"type": …}, {"type": "null"}]}`` (a score that could not be
given), the one union ``durable_ops.model.answers`` accepts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _branches(spec: Mapping[str, Any]) -> list[Any]:
    branches = spec.get("anyOf")
    return branches if isinstance(branches, list) else []


def kind_of(spec: Mapping[str, Any]) -> str | None:
    """The property's type other than "null"; None when it has no single one."""
    declared = spec.get("type")
    if isinstance(declared, str):
        return declared
    others = [b for b in _branches(spec) if isinstance(b, Mapping) and b.get("type") != "null"]
    if len(others) == 1 and isinstance(others[0].get("type"), str):
        return str(others[0]["type"])
    return None


def allows_null(spec: Mapping[str, Any]) -> bool:
    return any(isinstance(b, Mapping) and b.get("type") == "null" for b in _branches(spec))


def bounds_of(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    """The schema holding the property's limits: itself, or its non-null branch."""
    others = [b for b in _branches(spec) if isinstance(b, Mapping) and b.get("type") != "null"]
    return others[0] if others else spec
