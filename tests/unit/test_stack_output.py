"""What ``opsctl up`` prints: prefixed text on a terminal, one JSON object per line elsewhere."""

from __future__ import annotations

import io
import json

from durable_ops.stack.output import Output


def test_text_prefixes_every_child_line_and_prints_messages_plainly() -> None:
    out = io.StringIO()
    output = Output(out, as_json=False, width=10)
    output.child("gateway", "listening\n")
    output.say("stack_up", "durable-ops is up at http://127.0.0.1:8080/")
    assert out.getvalue().splitlines() == [
        "gateway    | listening",
        "durable-ops is up at http://127.0.0.1:8080/",
    ]


def test_json_passes_a_childs_log_lines_through_and_wraps_anything_else() -> None:
    out = io.StringIO()
    output = Output(out, as_json=True)
    output.child("workspace", '{"event": "serving", "process": "workspace"}\n')
    output.child("workspace", "Traceback (most recent call last):\n")
    output.child("gateway", '{"event": "no process field"}\n')
    output.say("restarting", "\nworkspace exited with code 1; restarting.\n", child="workspace")
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    assert records[0] == {"event": "serving", "process": "workspace"}
    assert records[1]["line"] == "Traceback (most recent call last):"
    assert records[1]["process"] == "workspace"
    assert records[2]["process"] == "gateway"
    assert records[3]["process"] == "up"
    assert records[3]["message"] == "workspace exited with code 1; restarting."
    assert records[3]["child"] == "workspace"
