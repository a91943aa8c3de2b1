"""The pure parts of figure 12 (``benchmarks.live_events``): how a relayed answer's tokens
are read and matched to the events that show them. The figure itself is run on purpose."""

from __future__ import annotations

import json

import pytest

from benchmarks.live_events import Answer, token_latencies
from benchmarks.token_tap import AnswerReader, Completion
from durable_ops.gateway.partial import fields_so_far


def _event(content: str | None) -> bytes:
    delta = {"role": "assistant"} if content is None else {"content": content}
    chunk = json.dumps({"choices": [{"index": 0, "delta": delta}]}).encode()
    return b"data: " + chunk + b"\n\n"


def test_the_tap_reads_each_chunk_as_the_answer_so_far_stamped_when_its_bytes_came() -> None:
    completions: list[Completion] = []
    reader = AnswerReader(completions)
    body = b"".join([_event(None), _event('{"a'), _event('": "x'), b"data: [DONE]\n\n"])
    cut = len(_event(None) + _event('{"a')) + 10  # the third event cut across two reads
    reader.feed(b"HTTP/1.1 200 OK\r\n\r\n" + body[:cut], 1.0)
    reader.feed(body[cut:] + _event(None) + _event("y"), 2.0)
    assert [(c.tokens, c.done) for c in completions] == [
        ([(1.0, '{"a'), (2.0, '{"a": "x')], True),
        ([(2.0, "y")], False),
    ]


def _answer(pieces: list[str], events: list[tuple[float, str]]) -> Answer:
    completion = Completion()
    for at, piece in enumerate(pieces):
        completion.add(float(at), piece)
    shown = [(arrived, fields_so_far(text)) for arrived, text in events]
    return Answer("op", completion, [(at, p) for at, p in shown if p is not None], holder=0)


def test_each_token_that_changes_the_page_is_timed_to_the_first_event_showing_it() -> None:
    # Tokens at 0, 1, 2, 3 and 4 s; the first two and the comma show no text.
    pieces = ['{"summary', '": "', "Strong", '", ', '"score": 7']
    answer = _answer(
        pieces, [(2.5, '{"summary": "Strong'), (4.25, '{"summary": "Strong", "score": 7')]
    )
    found = token_latencies(answer)
    assert found.seconds == pytest.approx([0.5, 0.25])  # "Strong" at 2 s, 7 at 4 s
    assert found.newest == pytest.approx([0.5, 0.25])
    assert (found.unshown, found.unmatched) == (0, 0)


def test_tokens_no_draft_showed_are_counted_apart() -> None:
    answer = _answer(['{"summary": "', "Strong", " fit"], [(1.5, '{"summary": "Strong')])
    found = token_latencies(answer)
    assert found.unshown == 1
    assert found.seconds == pytest.approx([0.5])
