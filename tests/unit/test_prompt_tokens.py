"""The prompt's token estimate and the cut by it (ADR 0063): one pure rule for what the
worker sends and what admission reserves."""

from __future__ import annotations

import pytest

from durable_ops.model.prompt_tokens import cut, tokens_of


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", 0),
        ("a", 1),
        ("abc", 1),
        ("abcd", 2),
        ("x" * 8_000, 2_667),  # English at 3 characters a token, rounded up
        ("é", 2),  # accented Latin: 2 bytes
        ("経", 3),  # CJK: 3 bytes
        ("🚀", 4),  # emoji: 4 bytes
        ("Übersetzung für", 9),  # 13 ASCII (5 tokens) and 2 two-byte letters
        ("経" * 1_450, 4_350),  # a prompt of 3,279 tokens was estimated at 484
        ("\ud800", 3),  # a lone surrogate counts, it does not raise
        ("2026", 4),  # a digit is a token of its own, as Gemma spends one on each
        ("+44 20 7946 0958, 2019-2024", 23),  # 20 digits and 7 other characters (3)
        ("7" * 6_000, 6_000),  # measured: 6,000 random digits took 6,000 tokens
    ],
)
def test_ascii_counts_three_characters_a_token_and_the_rest_its_utf8_bytes(
    text: str, tokens: int
) -> None:
    assert tokens_of(text) == tokens


@pytest.mark.parametrize(
    ("text", "budget", "kept"),
    [
        ("x" * 9, 3, "x" * 9),  # fits whole
        ("x" * 10, 3, "x" * 9),
        ("x" * 20_000, 2_000, "x" * 6_000),  # a 6,000-character English cut-off
        ("経" * 10, 7, "経" * 2),
        ("🚀" * 10, 3, ""),  # not even one fits
        ("ab経cd", 4, "ab経c"),  # 3 ASCII (1 token) + 3: a fourth starts a 2nd token
        ("abc経", 3, "abc"),
        ("", 0, ""),
    ],
)
def test_the_cut_keeps_the_longest_start_within_the_budget(
    text: str, budget: int, kept: str
) -> None:
    assert cut(text, budget) == kept
    assert tokens_of(kept) <= budget


@pytest.mark.parametrize("text", ["a経🚀é " * 3_000, "経" * 5_000 + "x" * 5_000])
def test_one_more_character_would_pass_the_budget(text: str) -> None:
    for budget in (1, 17, 1_000, 2_667):
        kept = cut(text, budget)
        assert text.startswith(kept)
        assert tokens_of(kept) <= budget < tokens_of(text[: len(kept) + 1])
