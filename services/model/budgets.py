"""Daily token budgets (issue 36, point 3): what admission reserves and the settlement
charges. Pure.

Each owner has a budget of model tokens per UTC day (its plan's default, or what an
operator set), and all owners together may have one more (``OPS_AI_GLOBAL_DAILY_TOKENS``).
A day's use is ``reserved + spent``: admission reserves a task's expected tokens
(``expected_tokens``) and refuses when that would pass a budget; each attempt's
settlement moves its actual count from reserved to spent (``settle``), and the
operation's end releases what is left of its reservation (ADR 0041).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from durable_ops.model import prompt_tokens
from durable_ops.model.errors import CapacityExceeded
from durable_ops.model.states import Plan
from durable_ops.model.subjects import SubjectKind
from durable_ops.model.tasks import MAX_ANSWER_TOKENS

BUDGET_EXHAUSTED = "budget_exhausted"
OWNER_EXHAUSTED = "Your daily AI budget is used up; it renews at 00:00 UTC."
GLOBAL_EXHAUSTED = "Today's AI budget for everyone is used up; it renews at 00:00 UTC."
SCHEDULED_DAY_EXHAUSTED = (
    "The AI budget of {day}, the day this analysis is scheduled for, is used up by what is"
    " already scheduled then; choose a later day."
)

# A Pro owner's tokens per UTC day. On the real model (Gemma 3 270M, issue 36 point 2) a
# strategy snapshot spends about 316 prompt + 271 completion tokens and a CV review about
# 338 + 346: some 600 to 700 an analysis, so 100,000 is about 150 analyses a day at
# today's sizes, or 100 with inputs twice as long, more than one person runs by hand.
# Admission reserves an analysis's worst case (``expected_tokens``: up to about 7,300 at
# the largest inputs, in any script), so even the last analysis of a busy day still fits.
PRO_DAILY_TOKENS = 100_000
# Free cannot run AI at all (``admission.require_entitled``): its budget is nothing.
DAILY_TOKENS_BY_PLAN: Mapping[Plan, int] = {Plan.FREE: 0, Plan.PRO: PRO_DAILY_TOKENS}
DAILY_TOKENS_MAX = 1_000_000_000  # what an operator may set for one owner

# The prompt's fixed part: the system message (instructions and the answer's shape in
# words, 566 to 698 characters today), the section lines and the chat template. A test
# holds every task's rendered frame under it (tests/unit/test_budgets.py).
PROMPT_FRAME_TOKENS = 400
# The context one model server slot needs (``scripts/real-model.sh serve --ctx-size``):
# the largest prompt as estimated (frame, every text at its budget and marked: about
# 5,200) and the answer cap fit with room to spare, and so does the largest prompt the
# estimate can be short of: a text's real tokens are at most 3 times its estimate (ASCII
# at a token a character, digits do that), and the fixed part at most a token a byte.
# A test holds both (tests/unit/test_budgets.py); on Gemma 3 270M the slot's memory is
# some 40 MB more than at 4,096, and only a prompt's real tokens cost time.
MODEL_CONTEXT_TOKENS = 18_432
# What a prompt was when its server did not say (an answer cut off before the usage that
# comes last, a server that sends none): the tokenizer's average, not the low count above,
# so what is charged is neither a reservation's worst case nor nothing. ASCII characters
# per token; other characters by their kind (``prompt_tokens_of`` says how measured).
CHARS_PER_TOKEN_USUALLY = 4
CHARS_PER_TOKEN_OTHER = 3  # other letters: accented Latin, Cyrillic, Greek, Arabic, Indic…
CHARS_PER_TOKEN_WIDE = 2  # East Asian wide: CJK ideographs, kana, Hangul, full width
CHARS_PER_TOKEN_ASTRAL = 1  # beyond the BMP, 4 UTF-8 bytes: emoji, rare ideographs
_WIDE = re.compile("[\u1100-\u11ff\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]")
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")
_DIGITS = re.compile("[0-9]")
_TWELFTHS = 12  # of a token: what one character of each kind takes, in whole numbers


def prompt_tokens_of(text: str) -> int:
    """The tokens a prompt of ``text`` most likely was, by the kinds of its characters.

    The rates are those the real model's tokenizer showed (Gemma 3 270M, llama-server's
    ``/tokenize``): ``prompt_tokens``' table (English prose 8,000 characters, 1,395 tokens;
    a README 2,305; accented French/German 6,000, 1,457; Japanese prose 8,000, 3,803;
    emoji 6,000, 6,000; Cyrillic, Arabic, Hindi 6,000, 1,100 to 2,100), and one sentence
    of a CV in each script (characters per token: English 5.1, German 4.8, Russian 4.2,
    Hindi 4.1, Arabic 3.3, Thai 3.1, Greek 2.9, Hebrew 2.3, Japanese 2.1, Korean 2.1,
    Chinese 1.7). Here: Japanese prose 4,000 where characters at 4 a token said 2,000,
    emoji about 5,500 for 1,500, English 2,000 as before. A digit is a token of its own, as
    the tokenizer splits numbers digit by digit (6,000 random digits, 6,000 tokens). Other
    text that is not words (random characters) takes more, as the table shows: this is no
    bound."""
    wide = len(text) - len(_WIDE.sub("", text))
    astral = len(text) - len(_ASTRAL.sub("", text))
    digits = len(text) - len(_DIGITS.sub("", text))
    ascii_ = len(text.encode("ascii", "ignore")) - digits
    other = len(text) - wide - astral - ascii_ - digits
    twelfths = (
        digits * _TWELFTHS
        + ascii_ * (_TWELFTHS // CHARS_PER_TOKEN_USUALLY)
        + other * (_TWELFTHS // CHARS_PER_TOKEN_OTHER)
        + wide * (_TWELFTHS // CHARS_PER_TOKEN_WIDE)
        + astral * (_TWELFTHS // CHARS_PER_TOKEN_ASTRAL)
    )
    return -(-twelfths // _TWELFTHS)


@dataclass(frozen=True)
class DayUse:
    """One budget's day: tokens reserved by running analyses, and spent by ended attempts."""

    reserved: int = 0
    spent: int = 0

    @property
    def used(self) -> int:
        return self.reserved + self.spent


@dataclass(frozen=True)
class Settled:
    """What one transition does to its operation's budget day: the deltas of the day's
    ``reserved`` (never positive) and ``spent``, and the reservation left outstanding."""

    reserved: int
    spent: int
    outstanding: int

    @property
    def moves(self) -> bool:
        return self.reserved != 0 or self.spent != 0


def daily_limit(plan: Plan, override: int | None) -> int:
    """The owner's tokens per day: what an operator set, else the plan's default."""
    return DAILY_TOKENS_BY_PLAN[plan] if override is None else override


def input_tokens(kind: SubjectKind, texts: Mapping[str, str]) -> int:
    """The estimated tokens of one subject's texts as the prompt sends them: each cut to
    its budget and marked, by the worker's own function (``TextField.shown``). What is
    cut is neither sent nor reserved for."""
    return sum(prompt_tokens.tokens_of(field.shown(texts[field.name])) for field in kind.fields)


def expected_tokens(input_tokens: int) -> int:
    """What one attempt of an analysis may spend: the prompt, its fixed part and its
    inputs' estimated tokens (``input_tokens``), and the answer's hard cap
    (``max_tokens``). Most answers stay far under the cap, so the settlement gives most of
    it back."""
    return PROMPT_FRAME_TOKENS + input_tokens + MAX_ANSWER_TOKENS


def used_today(*, spent: int, reserved: int) -> str:
    """A day's use in the settings page's words: "N used today", or, while analyses hold a
    reservation, "N used and R reserved today" (reserved tokens are not spent yet)."""
    if not reserved:
        return f"{spent:,} used today"
    return f"{spent:,} used and {reserved:,} reserved today"


def budget_day(now: datetime) -> date:
    return now.astimezone(UTC).date()


def renews_at(now: datetime) -> datetime:
    """The next 00:00 UTC."""
    return renewal_of(budget_day(now))


def renewal_of(day: date) -> datetime:
    """The 00:00 UTC that ends ``day``."""
    return datetime.combine(day + timedelta(days=1), time(), tzinfo=UTC)


def seconds_to_renewal(now: datetime, day: date | None = None) -> int:
    """Whole seconds to the 00:00 UTC that ends ``day`` (today when None), at least 1
    (a ``Retry-After``)."""
    renews = renews_at(now) if day is None else renewal_of(day)
    return max(1, math.ceil((renews - now).total_seconds()))


def exhausted(
    now: datetime,
    day: date | None = None,
    *,
    limit: int = 0,
    used: int = 0,
    needed: int = 0,
    everyone: bool = False,
) -> CapacityExceeded:
    """The refusal of a reservation of ``needed`` tokens on ``day`` (today when None), of a
    budget of ``limit`` with ``used`` taken: ``Retry-After`` is when that day's budget
    renews; a later day's (a scheduled analysis) says which day it is. A budget smaller
    than one analysis (an operator's 0 too) renews as small: waiting does not help, so
    there is no ``Retry-After``, and the sentence says it must be raised."""
    later = day if day is not None and day > budget_day(now) else None
    message = _refusal(limit=limit, used=used, needed=needed, everyone=everyone, later=later)
    retry_after = None if limit < needed else seconds_to_renewal(now, later)
    refused = CapacityExceeded(message, retry_after_seconds=retry_after)
    refused.code = BUDGET_EXHAUSTED
    return refused


def _refusal(*, limit: int, used: int, needed: int, everyone: bool, later: date | None) -> str:
    """Why: "used up" only when it is. An analysis reserves its worst case, so a budget
    with most of it unused may still be too small for one; the user is told how small,
    and that it must be raised (a budget of 0 is never "used up" to renew)."""
    whose = "Today's AI budget for everyone" if everyone else "Your daily AI budget"
    if limit < needed:
        return (
            f"{whose} ({limit:,} tokens) is less than one analysis may use ({needed:,}):"
            " none can start until the budget is raised."
        )
    left = max(0, limit - used)
    tokens = "token" if left == 1 else "tokens"
    short = f"has {left:,} {tokens} left, fewer than one analysis may use ({needed:,})"
    if later is not None:
        if not left:
            return SCHEDULED_DAY_EXHAUSTED.format(day=later.isoformat())
        return (
            f"The AI budget of {later.isoformat()}, the day this analysis is scheduled for,"
            f" {short}; choose a later day."
        )
    if not left:
        return GLOBAL_EXHAUSTED if everyone else OWNER_EXHAUSTED
    return f"{whose} {short}; it renews at 00:00 UTC."


def require_room(
    *, expected: int, everyone: DayUse, global_limit: int | None, now: datetime, day: date
) -> None:
    """The global budget of ``day``, when there is one, takes ``expected`` more tokens."""
    if global_limit is not None and everyone.used + expected > global_limit:
        raise exhausted(
            now, day, limit=global_limit, used=everyone.used, needed=expected, everyone=True
        )


def settle(*, outstanding: int, tokens: int, ends: bool) -> Settled:
    """An attempt's actual ``tokens`` (0 when it reported none) are spent; as many come
    off the operation's ``outstanding`` reservation (a retry draws on what is left, and
    past it on the day's budget); when the operation ``ends``, the rest is released."""
    drawn = min(tokens, outstanding)
    left = 0 if ends else outstanding - drawn
    return Settled(reserved=left - outstanding, spent=tokens, outstanding=left)
