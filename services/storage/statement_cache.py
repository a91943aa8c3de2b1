"""What is worked out once per statement object: a small LRU keyed by identity.

The hot statements are module constants or built once per batch size, so a few
hundred entries keep every one of them and let one-off statements pass through.
An entry holds its statement, so its id cannot be reused by another while cached.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from sqlalchemy import Executable

Value = TypeVar("Value")
STATEMENTS_MAX = 512


class StatementCache(Generic[Value]):
    def __init__(self) -> None:
        self._entries: OrderedDict[tuple[int, str], tuple[Executable, Value]] = OrderedDict()

    def get(self, statement: Executable, work_out: Callable[[], Value], variant: str = "") -> Value:
        """``statement``'s value (for ``variant``, e.g. a dialect), worked out on first use."""
        key = (id(statement), variant)
        found = self._entries.get(key)
        if found is not None and found[0] is statement:
            self._entries.move_to_end(key)
            return found[1]
        value = work_out()
        self._entries[key] = (statement, value)
        if len(self._entries) > STATEMENTS_MAX:
            self._entries.popitem(last=False)
        return value
