"""The PROD-003 benchmark's arithmetic (benchmarks.prod003) and the tap's server timings."""

from __future__ import annotations

import json
import math

from benchmarks.context import Context
from benchmarks.prod003 import (
    Analysis,
    CellRun,
    Found,
    _apply,
    answer_speed,
    plan,
    rows,
)
from benchmarks.token_tap import AnswerReader, Completion


def _event(payload: object) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def test_the_tap_keeps_the_servers_timings_and_usage() -> None:
    # llama-server's stream: a role chunk, text chunks, the finish chunk, then the usage
    # chunk without choices that carries the timings.
    timings = {"predicted_n": 3, "predicted_ms": 100.0, "predicted_per_second": 30.0}
    stream = b"".join(
        [
            _event({"choices": [{"delta": {"role": "assistant"}}]}),
            _event({"choices": [{"delta": {"content": '{"a"'}}]}),
            _event({"choices": [{"delta": {"content": ": 1}"}}]}),
            _event({"choices": [{"delta": {}, "finish_reason": "stop"}]}),
            _event({"choices": [], "usage": {"completion_tokens": 3}, "timings": timings}),
            b"data: [DONE]\n\n",
        ]
    )
    completions: list[Completion] = []
    reader = AnswerReader(completions)
    reader.feed(stream[:50], 1.0)
    reader.feed(stream[50:], 2.0)
    (answer,) = completions
    assert answer.done
    assert answer.tokens[-1][1] == '{"a": 1}'
    assert answer.timings == timings
    assert answer.usage == {"completion_tokens": 3}
    assert answer_speed(answer) == 30.0


def test_an_answers_speed_from_counts_when_the_server_gives_no_rate() -> None:
    assert answer_speed(Completion(timings={"predicted_n": 50, "predicted_ms": 2000.0})) == 25.0
    assert answer_speed(Completion(timings={"predicted_n": 50, "predicted_ms": 0})) is None
    assert answer_speed(Completion()) is None


def test_events_set_the_first_text_and_the_end() -> None:
    analysis = Analysis("cv.review", clicked=10.0, operation_id="op")
    running = {"operation": {"id": "op", "state": "running"}}
    _apply(analysis, 11.0, {**running, "draft": {"partial": {"summary": ""}}})
    assert not analysis.first_text  # nothing a page would show yet
    _apply(analysis, 12.0, {**running, "draft": {"partial": {"summary": "Str"}}})
    _apply(analysis, 13.0, {**running, "draft": {"partial": {"summary": "Strong"}}})
    _apply(analysis, 14.0, {"operation": {"id": "op", "state": "succeeded"}})
    _apply(analysis, 15.0, {"operation": {"id": "op", "state": "succeeded"}})
    assert (analysis.first_text, analysis.ended, analysis.state) == (12.0, 14.0, "succeeded")


def _cell(concurrency: int, slots: int, ends: list[float], *, noted: bool = True) -> CellRun:
    analyses = [
        Analysis("strategy.snapshot", 0.0, f"op{i}", "", end / 2, end, "succeeded", noted)
        for i, end in enumerate(ends)
    ]
    answers = [
        Completion(timings={"predicted_per_second": 20.0}, usage={"completion_tokens": 100})
        for _ in ends
    ]
    return CellRun(concurrency, slots, analyses, answers, max(ends), 1.0, 0.0, "m")


def test_a_cells_figures() -> None:
    cell = _cell(1, 1, [10.0, 20.0, 30.0, 40.0])
    assert cell.per_minute == 6.0
    assert cell.failures == 0
    assert cell.completion_tokens() == 400
    assert cell.cell().click_to_result_p95 == 38.5
    unnoted = _cell(1, 1, [10.0, 20.0], noted=False)
    assert (unnoted.failures, unnoted.per_minute) == (2, 0.0)


def test_rows_are_ratios_to_one_by_one_and_end_with_the_rule() -> None:
    found = Found([_cell(1, 1, [10.0, 20.0, 30.0, 40.0]), _cell(2, 1, [5.0, 10.0])], "m")
    table = rows(Context(quick=False), found)
    throughput = [row for row in table if row.figure.startswith("analyses a minute")]
    assert [row.value for row in throughput] == [1.0, 2.0]  # 12/min against 6/min
    tail = [row for row in table if row.figure.startswith("click → result")]
    assert math.isclose(tail[1].value, 9.75 / 38.5)
    decision = table[-1]
    assert decision.figure.startswith("default worker concurrency")
    assert decision.value == 2.0  # 2 paid on the one server measured


def test_the_plan() -> None:
    assert len(plan(quick=False)) == 9
    assert plan(quick=False)[0] == (1, 1)
    assert plan(quick=True) == [(1, 1), (2, 1), (4, 1)]
