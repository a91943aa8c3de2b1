"""What an attempt used: the pure rules (issue 36).

The bounds of one settlement, the sum of calls, how an exchange's usage is read
from what the model server said (its counts and llama.cpp's timings, else the
worker's own), and the settlement item that carries it whatever the outcome.
"""

from __future__ import annotations

import pytest

from durable_ops.ai_worker.inference.usage import exchange_usage, server_milliseconds
from durable_ops.model import budgets
from durable_ops.model.bounds import MODEL_MS_MAX, USAGE_TOKENS_MAX
from durable_ops.model.errors import InvalidArgument
from durable_ops.model.usage import Usage, total
from durable_ops.worker import Completed, Ending, WorkerShutdown
from durable_ops.worker.completer import Outcome, settlement_item
from tests.support.claimed import a_claim

CLAIMED = a_claim()


def test_a_settlements_usage_is_bounded() -> None:
    assert Usage(USAGE_TOKENS_MAX, USAGE_TOKENS_MAX, MODEL_MS_MAX).checked()
    for wrong in (
        Usage(-1, 0, 0),
        Usage(0, USAGE_TOKENS_MAX + 1, 0),
        Usage(0, 0, MODEL_MS_MAX + 1),
    ):
        with pytest.raises(InvalidArgument):
            wrong.checked()


def test_calls_add_up_and_none_is_nothing() -> None:
    assert total([]) is None
    assert total([Usage(1, 2, 3), Usage(10, 20, 30)]) == Usage(11, 22, 33)
    assert Usage(300, 112, 3100).tokens == 412
    assert Usage(300, 112, 3100).model_seconds == 3.1


def test_the_servers_counts_and_timings_win() -> None:
    usage = {"prompt_tokens": 41, "completion_tokens": 8}
    timings = {"prompt_ms": 120.4, "predicted_ms": 2979.8, "predicted_n": 8}
    found = exchange_usage(usage, timings, counted_tokens=99, measured_seconds=9.0)
    assert found == Usage(41, 8, 3100)


def test_without_the_servers_figures_the_worker_counts_and_measures() -> None:
    found = exchange_usage(None, None, counted_tokens=12, measured_seconds=1.2345)
    assert found == Usage(0, 12, 1234)
    # Half an answer is not an answer: a usage without both counts is not the server's.
    assert exchange_usage({"completion_tokens": 8}, None, counted_tokens=5, measured_seconds=0) == (
        Usage(0, 5, 0)
    )


def test_without_the_servers_figures_a_prompt_it_had_read_is_estimated() -> None:
    """A cancel before the usage (which comes last) charged the prompt nothing."""
    text = "x" * 1001
    read = exchange_usage(None, None, counted_tokens=7, measured_seconds=1, prompt_text=text)
    assert read == Usage(251, 7, 1000)  # ASCII at 4 characters a token, rounded up
    unread = exchange_usage(None, None, counted_tokens=0, measured_seconds=1, prompt_text=text)
    assert unread == Usage(0, 0, 1000)  # no content came: it may never have been read


# Texts of about the make-up (characters, UTF-8 bytes) of rows of prompt_tokens' table,
# all the estimate reads, and the tokens the real model (Gemma 3 270M) counted for those.
MADE_UP_AS_MEASURED = {
    "accented French/German": (
        ("Le café de Genève est très agréable en été, dit Jürgen. " * 110)[:6000],
        6788,
        1457,
    ),
    "Japanese prose": (("日本語の文章を読みます。東京で働いています" * 400)[:8000], 24000, 3803),
    "emoji": ("😀🎉🚀👍🌍🔥💡✨" * 750, 23250, 6000),
}


@pytest.mark.parametrize(
    ("text", "size", "measured"), MADE_UP_AS_MEASURED.values(), ids=MADE_UP_AS_MEASURED.keys()
)
def test_the_prompts_estimate_is_near_what_the_model_counted_in_any_script(
    text: str, size: int, measured: int
) -> None:
    """Within a tenth, where 4 characters a token whatever the script said 2,000 for the
    3,803 tokens of Japanese prose and 1,500 for 6,000 emoji."""
    assert abs(len(text.encode()) - size) <= size / 100
    usage = exchange_usage(None, None, counted_tokens=1, measured_seconds=0, prompt_text=text)
    assert abs(usage.prompt_tokens - measured) <= measured / 10


def test_a_prompt_is_counted_by_the_kinds_of_its_characters() -> None:
    assert budgets.prompt_tokens_of("e" * 1000) == 250  # ASCII at 4 a token
    assert budgets.prompt_tokens_of("é" * 999) == budgets.prompt_tokens_of("ไ" * 999) == 333
    assert budgets.prompt_tokens_of("日本" * 500) == budgets.prompt_tokens_of("한" * 1000) == 500
    assert budgets.prompt_tokens_of("😀" * 1000) == 1000
    assert budgets.prompt_tokens_of("ab日😀") == 2  # (3 + 3 + 6 + 12) twelfths
    assert budgets.prompt_tokens_of("") == 0
    assert budgets.prompt_tokens_of("2019-2024") == 9  # 8 digits, each a token, and "-"
    assert budgets.prompt_tokens_of("\ud800") == 1  # a lone surrogate is some other character


@pytest.mark.parametrize(
    "timings",
    [
        None,
        [],
        {"prompt_ms": 1.0},
        {"prompt_ms": "1", "predicted_ms": 2},
        {"prompt_ms": -1, "predicted_ms": 2},
    ],
)
def test_timings_that_are_not_llamas_are_not_used(timings: object) -> None:
    assert server_milliseconds(timings) is None


def test_a_servers_absurd_figures_are_held_within_the_bounds() -> None:
    usage = {"prompt_tokens": 10**12, "completion_tokens": True}
    found = exchange_usage(
        usage, {"prompt_ms": 1e12, "predicted_ms": 0}, counted_tokens=3, measured_seconds=0
    )
    assert found == Usage(0, 3, MODEL_MS_MAX)  # a bool is no count: the worker's own
    big = exchange_usage(
        {"prompt_tokens": 10**12, "completion_tokens": 1},
        None,
        counted_tokens=0,
        measured_seconds=0,
    )
    assert big.prompt_tokens == USAGE_TOKENS_MAX
    assert big.checked() == big


@pytest.mark.parametrize(
    ("outcome", "ending"),
    [
        (Completed("note-1"), Ending.COMPLETED),
        (WorkerShutdown(), Ending.RELEASED),
        (Ending.CANCELLED, Ending.CANCELLED),
    ],
)
def test_every_settlement_item_carries_the_usage(outcome: Outcome, ending: Ending) -> None:
    item, found = settlement_item(CLAIMED, outcome, Usage(300, 112, 3100))
    assert found is ending
    assert (item.usage.prompt_tokens, item.usage.completion_tokens, item.usage.model_ms) == (
        300,
        112,
        3100,
    )
    bare, _ = settlement_item(CLAIMED, outcome)
    assert not bare.HasField("usage")  # nothing reported: nothing recorded


@pytest.mark.parametrize("huge", [float("inf"), 10**401, 1e308])
def test_a_servers_overflowing_time_is_held_not_raised(huge: float) -> None:
    """1e400 in the server's JSON (infinity) or a 401-digit integer raised OverflowError
    while the exchange closed: the answer that came was lost and the attempt failed."""
    timings = {"prompt_ms": huge, "predicted_ms": huge}
    assert server_milliseconds(timings) == 2 * MODEL_MS_MAX
    found = exchange_usage(None, timings, counted_tokens=2, measured_seconds=0)
    assert found == Usage(0, 2, MODEL_MS_MAX)
