"""What ``opsctl up`` prints: readable lines on a terminal, JSON lines otherwise.

On a terminal each child line gets a ``name | `` prefix and the children log
as text. Elsewhere (a pipe, a log collector) every line is one JSON object
with a ``process`` field: a child's own JSON log lines pass through, anything
else it prints (a traceback before logging starts) is wrapped, and the
stack's own messages are events of the process ``up``.
"""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from typing import IO, Any

STACK = "up"


class Output:
    def __init__(self, stream: IO[str], *, as_json: bool, width: int = 0) -> None:
        self.stream = stream
        self.as_json = as_json
        self.width = max(width, len(STACK))
        self._lock = threading.Lock()

    def child(self, name: str, line: str) -> None:
        """One line a child printed."""
        line = line.rstrip("\n")
        if not self.as_json:
            self._write(f"{name.ljust(self.width)} | {line}")
            return
        record = _json_object(line)
        if record is None:
            record = {"event": "output", "line": line, "timestamp": _now()}
        record.setdefault("process", name)
        self._write(json.dumps(record))

    def say(self, event: str, message: str, **fields: Any) -> None:
        """One message of the stack itself; on a terminal, just the message."""
        if not self.as_json:
            self._write(message)
            return
        record = {"event": event, "message": message.strip(), **fields}
        self._write(json.dumps({"process": STACK, "timestamp": _now(), **record}))

    def _write(self, text: str) -> None:
        with self._lock:
            self.stream.write(text + "\n")
            self.stream.flush()


def _json_object(line: str) -> dict[str, Any] | None:
    if not line.startswith("{"):
        return None
    try:
        parsed = json.loads(line)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _now() -> str:
    return datetime.now(UTC).isoformat()
