"""Reading one lease stream (``Heartbeat``, ``HoldLeases``) while waiting for a cancel.

The servicer answers every beat in order, and may also have to speak first:
when the cancel lands between two beats, ``BeatReader.next`` returns
``PUSHED`` and the read it had started stays pending for the next call, so no
beat is lost or read twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Final, Generic, TypeVar

Beat = TypeVar("Beat")


class Pushed:
    """What ``BeatReader.next`` answers when the cancel came before the next beat."""


PUSHED: Final = Pushed()


class BeatReader(Generic[Beat]):
    """The requests of one lease stream, read while also waiting for a pushed cancel."""

    def __init__(self, requests: AsyncIterator[Beat]) -> None:
        self._requests = requests
        self._pending: asyncio.Future[Beat | None] | None = None

    async def next(self, unless: asyncio.Event | None = None) -> Beat | Pushed | None:
        """The next beat; ``None`` at the end of the stream; ``PUSHED`` once ``unless`` is set."""
        if self._pending is None:
            self._pending = asyncio.ensure_future(anext(self._requests, None))
        if unless is not None and not self._pending.done():
            stop: asyncio.Future[object] = asyncio.ensure_future(unless.wait())
            try:
                await asyncio.wait((self._pending, stop), return_when=asyncio.FIRST_COMPLETED)
            finally:
                stop.cancel()
            if not self._pending.done():
                return PUSHED
        beat, self._pending = await self._pending, None
        return beat

    def close(self) -> None:
        if self._pending is not None:
            self._pending.cancel()
