"""The answer so far as the worker sends it on a beat: text UTF-8 can carry, whatever the
model server's chunks split (``model.drafts``)."""

from __future__ import annotations

import json

import pytest

from durable_ops.model.drafts import clipped

GRINNING = "\U0001f600"


def chunk_text(escaped: str) -> str:
    """The content of one chat-completion chunk, as json.loads reads an escaped one."""
    text: str = json.loads(f'"{escaped}"')
    return text


def test_an_emoji_sent_in_two_escaped_halves_is_one_character() -> None:
    # "{\"summary\": \"Great \ud83d" in one chunk, "\ude00 fit" in the next.
    pieces = [chunk_text('{\\"summary\\": \\"Great \\ud83d'), chunk_text("\\ude00 fit")]
    so_far = "".join(pieces)
    assert clipped(so_far) == '{"summary": "Great ' + GRINNING + " fit"
    clipped(so_far).encode()  # what the beat's protobuf does with it


def test_a_half_whose_pair_is_still_to_come_waits_for_the_next_draft() -> None:
    so_far = chunk_text('{\\"summary\\": \\"Great \\ud83d')
    assert clipped(so_far) == '{"summary": "Great '


@pytest.mark.parametrize("lone", ["\\ude00", "\\ud83d"])
def test_a_half_that_never_has_a_pair_is_a_replacement_character(lone: str) -> None:
    so_far = chunk_text(f"a{lone}b")
    assert clipped(so_far) == "a\ufffdb"


def test_text_without_surrogates_is_cut_as_before() -> None:
    assert clipped("a" + GRINNING, 4) == "a"  # the emoji is four bytes: not cut through
    assert clipped("a" + GRINNING, 5) == "a" + GRINNING
