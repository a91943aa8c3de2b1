"""The ``filter`` of google.longrunning ``ListOperations``: ``key=value`` terms joined by AND.

Pure. The keys are ``state`` (a state name, e.g. ``running``) and
``task_type``; a value may be quoted. Anything else is the caller's error,
said plainly, so a filter that would match nothing by mistake is never
silently ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from durable_ops.model.errors import InvalidArgument
from durable_ops.model.states import OperationState

FILTER_MAX = 200
_TERM = re.compile(r'\s*([a-z_]+)\s*=\s*("([^"]*)"|[^\s"]+)\s*')
_AND = re.compile(r"\s+AND\s+", re.IGNORECASE)
KEYS = ("state", "task_type")


@dataclass(frozen=True)
class OperationFilter:
    state: OperationState | None = None
    task_type: str = ""


def parse_filter(raw: str) -> OperationFilter:
    if len(raw) > FILTER_MAX:
        raise InvalidArgument("filter", f"must be at most {FILTER_MAX} characters")
    if not raw.strip():
        return OperationFilter()
    values: dict[str, str] = {}
    for term in _AND.split(raw.strip()):
        match = _TERM.fullmatch(term)
        if match is None:
            raise InvalidArgument("filter", f'{term!r} is not a term like state="running"')
        key, value = (
            match.group(1),
            match.group(3) if match.group(3) is not None else match.group(2),
        )
        if key not in KEYS:
            raise InvalidArgument("filter", f"{key!r} is not a filter key; use {' or '.join(KEYS)}")
        if key in values:
            raise InvalidArgument("filter", f"{key!r} is given twice")
        values[key] = value
    state = values.get("state")
    if state is not None and state not in {s.value for s in OperationState}:
        known = ", ".join(s.value for s in OperationState)
        raise InvalidArgument("filter", f"{state!r} is not a state; use one of {known}")
    return OperationFilter(
        state=OperationState(state) if state is not None else None,
        task_type=values.get("task_type", ""),
    )
