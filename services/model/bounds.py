"""Bounds of SPEC §3. Values beyond them are rejected, never clamped.

Column widths in ``durable_ops.storage.schema`` are derived from these constants,
so a bound and the column that stores it cannot disagree.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timedelta

from durable_ops.model.errors import CONTROL_CHARACTER, InvalidArgument

ID_MAX = 64  # any row id a caller names; ids the services issue are 32 hex characters
_ID = re.compile(f"[A-Za-z0-9_-]{{1,{ID_MAX}}}")
TASK_TYPE_MAX = 64
IDEMPOTENCY_KEY_MAX = 128
SUBJECT_TYPE_MAX = 32
SUBJECT_ID_MAX = 64
OWNER_ID_MAX = 64
MAX_ATTEMPTS_RANGE = (1, 10)
RETRY_DELAY_SECONDS_RANGE = (1, 3600)
DEFAULT_RETRY_DELAY_SECONDS = 30  # a create that names none
LEASE_SECONDS_RANGE = (5, 600)
LEASE_TOKEN_MAX = 128  # the services issue 43 characters
CLAIM_WAIT_SECONDS_MAX = 20  # a waiting claim answers within this, claimed or not
# Task types one claim may name: each is a part of the claim's UNION (ADR 0051) and each
# count its own prepared statement, so the claim's cost and the statements kept are bounded.
CLAIM_TASK_TYPES_MAX = 32
WAIT_SECONDS_MAX = 30.0  # WaitOperation and the HTTP long-poll answer within this, done or not
DEADLINE_MAX_AHEAD = timedelta(hours=24)  # ahead of the operation's not_before
# How far ahead a create may schedule its operation (``not_before``, ADR 0046): a month of
# reminders fits, and a mistyped year is refused instead of parked in the queue for ever.
NOT_BEFORE_MAX_AHEAD = timedelta(days=30)
NOT_BEFORE_TOO_FAR = "not_before_too_far"
# A retryable failure's earliest next attempt (a model provider's Retry-After, ADR 68):
# a second at least, and at most a day, as long as any deadline may lie ahead.
RETRY_AFTER_RANGE = (timedelta(seconds=1), timedelta(days=1))
RETRY_AFTER_OUT_OF_RANGE = "retry_after_out_of_range"
PROGRESS_RANGE = (0, 100)
PRIORITY_RANGE = (-1000, 1000)
FAILURE_CODE_MAX = 64
FAILURE_MESSAGE_MAX = 512
PROVIDER_MAX = 32
MODEL_MAX = 128
ROUTE_MAX = 16
# A W3C traceparent, version 00: "00-" + 32 hex + "-" + 16 hex + "-" + 2 hex.
TRACE_PARENT_MAX = 55
JOB_TITLE_MAX = 200
JOB_COMPANY_MAX = 200
JOB_DESCRIPTION_MAX = 20_000
ATTACHMENT_FILENAME_MAX = 255
ATTACHMENT_TEXT_MAX = 200_000
# What one owner may store (SPEC "stored bytes"; issue 35): generous, a year of a job search
# with a CV version a week, and a bound on what one account can make the database hold.
OWNER_JOBS_MAX = 2_000
OWNER_ATTACHMENTS_MAX = 500
OWNER_STORED_BYTES_MAX = 64 * 1024 * 1024  # UTF-8 bytes of the texts a caller wrote
# A result records the name of its second reference as it was (a CV's filename, a job's title).
RESULT_CONTEXT_NAME_MAX = max(ATTACHMENT_FILENAME_MAX, JOB_TITLE_MAX)
# Results kept per (owner, task type, subject): the newest; an older one is deleted when a
# newer is published (``storage.workspace.publish_note`` says why this many).
RESULTS_KEPT_PER_SUBJECT = 20
PAGE_SIZE_RANGE = (1, 100)
PAGE_SIZE_RULE = f"must be an integer between {PAGE_SIZE_RANGE[0]} and {PAGE_SIZE_RANGE[1]}"
PAGE_SIZE_DEFAULT = 20
PAGE_TOKEN_MAX = 512
OLDER_THAN_MAX = timedelta(days=3660)  # the operator's "created at least this long ago"

_TASK_TYPE = re.compile(r"[a-z0-9._-]+")  # a task type, and a failure's stable code
_TRACE_PARENT = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
_OWNER_ID = re.compile(r"[A-Za-z0-9._@:-]+")
# Printable ASCII without spaces: an idempotency key, a subject id (the API document states it).
KEY_PATTERN = "^[!-~]+$"
_KEY_TEXT = re.compile(KEY_PATTERN)
# C0 controls, DEL and C1 controls (U+0085 "next line", U+009B the terminal's escape).
# A line of text (a title, a filename, a key) has none, nor Unicode's line and paragraph
# separators, nor the bidi embeddings, overrides and isolates, which make a name show
# other than it reads ("cv\u202efdp.exe" shows as "cvexe.pdf"); text that may span lines
# (a job description, a CV) keeps tab, line feed, carriage return and those separators.
_NOT_IN_A_LINE = r"\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_NOT_IN_TEXT = r"\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f"
_CONTROL = re.compile(f"[{_NOT_IN_A_LINE}]")
_CONTROL_BETWEEN_LINES = re.compile(f"[{_NOT_IN_TEXT}]")
# The same rules as patterns of the characters allowed, for the API document (``openapi``).
LINE_CHAR = f"[^{_NOT_IN_A_LINE}]"
TEXT_CHAR = f"[^{_NOT_IN_TEXT}]"
# Characters of the Basic Multilingual Plane that show nothing, so text of them alone is
# blank: format characters (Unicode's Cf: the soft hyphen, zero-width spaces and joiners,
# bidi controls, the BOM), variation selectors and the combining grapheme joiner, and the
# Hangul fillers and the blank Braille pattern, letters or symbols drawn as nothing.
_FORMAT = (
    "\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u115f\u1160"
    "\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\u2800\u3164"
    "\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb"
)
_SHOWS_NOTHING = f"\\s\\x00-\\x1f\\x7f-\\x9f{_FORMAT}"
VISIBLE_CHAR = f"[^{_SHOWS_NOTHING}]"
# Beyond that plane too (tags, musical format marks, the variation selectors' supplement):
# checked here but left out of the API document's pattern, which a validator without
# ECMAScript's ``u`` flag reads as pairs of halves.
_VISIBLE = re.compile(f"[^{_SHOWS_NOTHING}\U0001d173-\U0001d17a\U000e0000-\U000e0fff]")
# JSON can spell a lone surrogate (\ud800): that is not text, and protobuf cannot encode it.
_SURROGATE = re.compile(r"[\ud800-\udfff]")
# What a pasted line may carry around it; trimmed, where any other control is refused.
_LINE_BLANKS = " \t\r\n"


def could_be_id(value: str) -> bool:
    """Whether ``value`` has the shape of a row id (one a service could have issued)."""
    return _ID.fullmatch(value) is not None


def text(field: str, value: str, max_length: int, *, required: bool = True) -> str:
    if required and not value:
        raise InvalidArgument(field, "is required")
    if len(value) > max_length:
        raise InvalidArgument(field, f"must be at most {max_length:,} characters")
    return value


def _refuse_unprintable(field: str, value: str, control: re.Pattern[str], allowed: str) -> None:
    found = control.search(value)
    if found is not None:
        raise InvalidArgument(
            field,
            f"must not contain control characters{allowed}; "
            f"found U+{ord(found.group()):04X} at character {found.start() + 1}",
            code=CONTROL_CHARACTER,
        )
    surrogate = _SURROGATE.search(value)
    if surrogate is not None:
        raise InvalidArgument(
            field,
            f"must be valid Unicode text; found the lone surrogate "
            f"U+{ord(surrogate.group()):04X} at character {surrogate.start() + 1}",
        )


def blank(value: str) -> bool:
    """Nothing in ``value`` shows: white space, and format characters (zero-width space, BOM)."""
    return _VISIBLE.search(value) is None


def single_line(field: str, value: str, max_length: int, *, required: bool = True) -> str:
    """A line of text, trimmed: no control character or line break in it (code
    ``control_character``); when required, something in it shows."""
    trimmed = text(field, value.strip(), max_length, required=required)
    _refuse_unprintable(field, value.strip(_LINE_BLANKS), _CONTROL, " or line breaks")
    if required and blank(trimmed):
        raise InvalidArgument(field, "must not be empty")
    return trimmed


def multi_line(field: str, value: str, max_length: int, *, required: bool = True) -> str:
    """Text that may span lines: tab, LF and CR are kept; any other control is refused;
    when required, something in it shows."""
    text(field, value, max_length, required=required)
    _refuse_unprintable(
        field, value, _CONTROL_BETWEEN_LINES, " other than tab, line feed and carriage return"
    )
    if required and blank(value):
        raise InvalidArgument(field, "must not be empty")
    return value


def int_range(field: str, value: int, bounds: tuple[int, int]) -> int:
    low, high = bounds
    if not low <= value <= high:
        raise InvalidArgument(field, f"must be between {low} and {high}")
    return value


def page_size(value: int) -> int:
    low, high = PAGE_SIZE_RANGE
    if not low <= value <= high:
        raise InvalidArgument("page_size", PAGE_SIZE_RULE)
    return value


def task_type(value: str) -> str:
    text("task_type", value, TASK_TYPE_MAX)
    if not _TASK_TYPE.fullmatch(value):
        raise InvalidArgument("task_type", "may contain only a-z, 0-9, '.', '_' and '-'")
    return value


def claim_task_types(values: Sequence[str]) -> list[str]:
    """The task types a claim names, each once, in order; at most ``CLAIM_TASK_TYPES_MAX``."""
    names = list(dict.fromkeys(task_type(value) for value in values))
    if len(names) > CLAIM_TASK_TYPES_MAX:
        raise InvalidArgument("task_types", f"may name at most {CLAIM_TASK_TYPES_MAX} task types")
    return names


def owner_id(value: str) -> str:
    text("owner", value, OWNER_ID_MAX)
    if not _OWNER_ID.fullmatch(value):
        raise InvalidArgument("owner", "may contain only A-Z, a-z, 0-9 and . _ @ : -")
    return value


def idempotency_key(value: str) -> str:
    text("idempotency_key", value, IDEMPOTENCY_KEY_MAX)
    _refuse_unprintable("idempotency_key", value, _CONTROL, "")
    if not _KEY_TEXT.fullmatch(value):
        raise InvalidArgument("idempotency_key", "must be printable ASCII without spaces")
    return value


def subject(subject_type: str, subject_id: str) -> tuple[str, str]:
    text("subject_type", subject_type, SUBJECT_TYPE_MAX)
    text("subject_id", subject_id, SUBJECT_ID_MAX)
    if not _TASK_TYPE.fullmatch(subject_type):
        raise InvalidArgument("subject_type", "may contain only a-z, 0-9, '.', '_' and '-'")
    if not _KEY_TEXT.fullmatch(subject_id):
        raise InvalidArgument("subject_id", "must be printable ASCII without spaces")
    return subject_type, subject_id


def deadline(value: datetime, now: datetime, not_before: datetime | None = None) -> datetime:
    """A deadline after ``now`` and at most 24 hours after the operation becomes due
    (``not_before``, when it is scheduled later than ``now``)."""
    if value <= now:
        raise InvalidArgument("deadline", "must be in the future")
    due = now if not_before is None else max(now, not_before)
    if value <= due:
        raise InvalidArgument("deadline", "must be after not_before")
    if value - due > DEADLINE_MAX_AHEAD:
        raise InvalidArgument("deadline", "must be at most 24 hours after the operation is due")
    return value


def not_before(value: datetime, now: datetime) -> datetime:
    """When a scheduled operation becomes claimable: at most 30 days ahead. A moment
    already past means "now": it never puts the operation ahead of those due before."""
    if value - now > NOT_BEFORE_MAX_AHEAD:
        raise InvalidArgument(
            "not_before",
            f"must be at most {NOT_BEFORE_MAX_AHEAD.days} days ahead",
            code=NOT_BEFORE_TOO_FAR,
        )
    return max(value, now)


def retry_after(value: timedelta) -> timedelta:
    """A retryable failure's hint of when to try again, within ``RETRY_AFTER_RANGE``."""
    low, high = RETRY_AFTER_RANGE
    if not low <= value <= high:
        raise InvalidArgument(
            "retry_after",
            f"must be {low.total_seconds():.0f} to {high.total_seconds():,.0f} seconds",
            code=RETRY_AFTER_OUT_OF_RANGE,
        )
    return value


def provenance(provider: str, model: str, route: str) -> tuple[str, str, str]:
    text("provider", provider, PROVIDER_MAX, required=False)
    text("model", model, MODEL_MAX, required=False)
    text("route", route, ROUTE_MAX, required=False)
    return provider, model, route


def failure(code: str, message: str) -> tuple[str, str]:
    failure_code(code)
    text("failure_message", message, FAILURE_MESSAGE_MAX, required=False)
    return code, message


def failure_code(code: str) -> str:
    """A failure code as a worker reports it and an operator searches for it."""
    text("failure_code", code, FAILURE_CODE_MAX)
    if not _TASK_TYPE.fullmatch(code):  # shown to the owner (google.longrunning's reason)
        raise InvalidArgument("failure_code", "may contain only a-z, 0-9, '.', '_' and '-'")
    return code


def trace_parent(value: str) -> str:
    """``""`` or a W3C ``traceparent`` (version 00): the only trace data an operation keeps."""
    if value and (len(value) != TRACE_PARENT_MAX or not _TRACE_PARENT.fullmatch(value)):
        raise InvalidArgument(
            "trace_parent", "must be a W3C traceparent (00-<trace>-<span>-<flags>)"
        )
    return value


# What one settlement may report of an attempt's model calls (issue 36): far above any
# answer of ours (a few hundred tokens), low enough that totals never near 2**63.
USAGE_TOKENS_MAX = 10_000_000
MODEL_MS_MAX = 24 * 3600 * 1000  # a day of the model's own time, in milliseconds
