"""The batcher: concurrent items applied together, each caller answered alone."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from durable_ops.batching import Batcher


class Doubler:
    def __init__(self) -> None:
        self.batches: list[list[int]] = []

    async def apply(self, items: list[int]) -> Sequence[int | Exception]:
        self.batches.append(items)
        return [ValueError(f"odd {item}") if item % 2 else item * 2 for item in items]


def test_items_in_one_window_share_one_batch_and_get_their_own_answers() -> None:
    doubler = Doubler()

    async def run() -> list[int | BaseException]:
        batcher = Batcher(doubler.apply, max_batch=10, window_seconds=0.05)
        found = await asyncio.gather(*(batcher.submit(n) for n in range(4)), return_exceptions=True)
        assert (batcher.batches, batcher.items) == (1, 4)
        return found

    answers = asyncio.run(run())
    assert doubler.batches == [[0, 1, 2, 3]]
    assert answers[0::2] == [0, 4]
    assert [str(error) for error in answers[1::2]] == ["odd 1", "odd 3"]


def test_a_full_batch_goes_at_once_and_the_rest_after_the_window() -> None:
    doubler = Doubler()

    async def run() -> None:
        batcher = Batcher(doubler.apply, max_batch=3, window_seconds=0.05)
        assert await asyncio.gather(*(batcher.submit(n * 2) for n in range(5))) == [
            0,
            4,
            8,
            12,
            16,
        ]

    asyncio.run(run())
    assert doubler.batches == [[0, 2, 4], [6, 8]]


def test_a_failure_of_the_whole_batch_reaches_every_caller() -> None:
    async def broken(items: list[int]) -> Sequence[int | Exception]:
        raise ConnectionError("the database is away")

    async def run() -> None:
        batcher = Batcher(broken, max_batch=10, window_seconds=0.01)
        for outcome in await asyncio.gather(
            batcher.submit(1), batcher.submit(2), return_exceptions=True
        ):
            assert isinstance(outcome, ConnectionError)

    asyncio.run(run())


def test_a_wrong_number_of_answers_fails_the_batch() -> None:
    async def short(items: list[int]) -> Sequence[int | Exception]:
        return items[:-1]

    async def run() -> None:
        batcher = Batcher(short, max_batch=10, window_seconds=0.01)
        with pytest.raises(RuntimeError, match="1 answers for 2 items"):
            await asyncio.gather(batcher.submit(1), batcher.submit(2))
        await batcher.drain()

    asyncio.run(run())
