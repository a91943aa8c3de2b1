"""Every bound of SPEC §3 at its edge: accepted at the limit, rejected one past it.

The limits are written here as literal numbers from the SPEC, not read from
``bounds``' constants, so a constant drifting from the SPEC fails a test.
Nothing is clamped: an accepted value comes back unchanged, a rejected one raises.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Final

import pytest

from durable_ops.model import bounds
from durable_ops.model.errors import InvalidArgument

NOW: Final = datetime(2026, 8, 9, 12, 0, tzinfo=UTC)
TICK: Final = timedelta(microseconds=1)


def rejected(field: str, call: Callable[[], object]) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as caught:
        call()
    error = caught.value
    assert error.field == field
    assert error.kind == "invalid_argument"
    assert error.code == "invalid_argument"
    assert str(error).startswith(f"{field}:")
    return error


def rejected_with(field: str, code: str, call: Callable[[], object]) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as caught:
        call()
    assert (caught.value.field, caught.value.code) == (field, code)
    return caught.value


# --- text lengths -------------------------------------------------------------------------

# (field, validator taking one string and returning what it accepted, SPEC limit, filler)
TextValidator = Callable[[str], str]


def _subject_type(value: str) -> str:
    return bounds.subject(value, "42")[0]


def _subject_id(value: str) -> str:
    return bounds.subject("job", value)[1]


def _failure_code(value: str) -> str:
    return bounds.failure(value, "")[0]


def _failure_message(value: str) -> str:
    return bounds.failure("timeout", value)[1]


def _provider(value: str) -> str:
    return bounds.provenance(value, "m", "local")[0]


def _model(value: str) -> str:
    return bounds.provenance("p", value, "local")[1]


def _route(value: str) -> str:
    return bounds.provenance("p", "m", value)[2]


TEXT_BOUNDS: Final[list[tuple[str, TextValidator, int, str]]] = [
    ("task_type", bounds.task_type, 64, "a"),
    ("idempotency_key", bounds.idempotency_key, 128, "K"),
    ("subject_type", _subject_type, 32, "j"),
    ("subject_id", _subject_id, 64, "7"),
    ("failure_code", _failure_code, 64, "x"),
    ("failure_message", _failure_message, 512, "m"),
    ("provider", _provider, 32, "p"),
    ("model", _model, 128, "m"),
    ("route", _route, 16, "r"),
]
TEXT_IDS: Final = [field for field, *_ in TEXT_BOUNDS]


@pytest.mark.parametrize(("field", "validate", "limit", "filler"), TEXT_BOUNDS, ids=TEXT_IDS)
def test_text_is_accepted_at_its_limit_unchanged(
    field: str, validate: TextValidator, limit: int, filler: str
) -> None:
    value = filler * limit
    assert validate(value) == value


@pytest.mark.parametrize(("field", "validate", "limit", "filler"), TEXT_BOUNDS, ids=TEXT_IDS)
def test_text_one_past_its_limit_is_rejected_naming_the_field(
    field: str, validate: TextValidator, limit: int, filler: str
) -> None:
    error = rejected(field, lambda: validate(filler * (limit + 1)))
    assert str(limit) in error.message


@pytest.mark.parametrize(("field", "validate", "limit", "filler"), TEXT_BOUNDS, ids=TEXT_IDS)
def test_text_far_past_its_limit_is_rejected_not_cut(
    field: str, validate: TextValidator, limit: int, filler: str
) -> None:
    rejected(field, lambda: validate(filler * (limit * 10)))


@pytest.mark.parametrize(
    ("field", "validate"),
    [
        ("task_type", bounds.task_type),
        ("idempotency_key", bounds.idempotency_key),
        ("subject_type", _subject_type),
        ("subject_id", _subject_id),
    ],
)
def test_identifying_text_is_required(field: str, validate: TextValidator) -> None:
    rejected(field, lambda: validate(""))


@pytest.mark.parametrize(
    ("field", "validate"),
    [
        ("failure_message", _failure_message),
        ("provider", _provider),
        ("model", _model),
        ("route", _route),
    ],
)
def test_optional_text_may_be_empty(field: str, validate: TextValidator) -> None:
    assert validate("") == ""


# --- task type alphabet -------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", ["strategy.snapshot", "cv.review", "a", "a-b_c.d", "0123456789", "z" * 64]
)
def test_task_type_accepts_lowercase_digits_dot_underscore_dash(value: str) -> None:
    assert bounds.task_type(value) == value


@pytest.mark.parametrize(
    "value",
    ["Strategy.snapshot", "cv review", "cv/review", "cv:review", "cv.review\n", "é", "a+b", " a"],
)
def test_task_type_rejects_other_characters(value: str) -> None:
    rejected("task_type", lambda: bounds.task_type(value))


# --- integer ranges (through int_range and the exported range constants) -------------------

INT_BOUNDS: Final[list[tuple[str, tuple[int, int], int, int]]] = [
    ("max_attempts", bounds.MAX_ATTEMPTS_RANGE, 1, 10),
    ("retry_delay_seconds", bounds.RETRY_DELAY_SECONDS_RANGE, 1, 3600),
    ("lease_seconds", bounds.LEASE_SECONDS_RANGE, 5, 600),
    ("progress_percent", bounds.PROGRESS_RANGE, 0, 100),
]
INT_IDS: Final = [field for field, *_ in INT_BOUNDS]


@pytest.mark.parametrize(("field", "range_", "low", "high"), INT_BOUNDS, ids=INT_IDS)
def test_int_range_constant_matches_the_spec(
    field: str, range_: tuple[int, int], low: int, high: int
) -> None:
    assert range_ == (low, high)


@pytest.mark.parametrize(("field", "range_", "low", "high"), INT_BOUNDS, ids=INT_IDS)
def test_int_accepted_at_both_limits_unchanged(
    field: str, range_: tuple[int, int], low: int, high: int
) -> None:
    assert bounds.int_range(field, low, range_) == low
    assert bounds.int_range(field, high, range_) == high


@pytest.mark.parametrize(("field", "range_", "low", "high"), INT_BOUNDS, ids=INT_IDS)
def test_int_one_past_either_limit_is_rejected_naming_the_field(
    field: str, range_: tuple[int, int], low: int, high: int
) -> None:
    rejected(field, lambda: bounds.int_range(field, low - 1, range_))
    rejected(field, lambda: bounds.int_range(field, high + 1, range_))


@pytest.mark.parametrize(("field", "range_", "low", "high"), INT_BOUNDS, ids=INT_IDS)
def test_int_far_out_of_range_is_rejected_not_clamped(
    field: str, range_: tuple[int, int], low: int, high: int
) -> None:
    rejected(field, lambda: bounds.int_range(field, -(10**9), range_))
    rejected(field, lambda: bounds.int_range(field, 10**9, range_))


# --- deadline -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ahead", [TICK, timedelta(minutes=30), timedelta(hours=24)], ids=["1us", "30min", "24h"]
)
def test_deadline_in_the_future_up_to_24h_ahead_is_accepted(ahead: timedelta) -> None:
    assert bounds.deadline(NOW + ahead, NOW) == NOW + ahead


@pytest.mark.parametrize(
    "ahead",
    [timedelta(hours=24) + TICK, timedelta(hours=25), timedelta(days=365)],
    ids=["24h+1us", "25h", "1y"],
)
def test_deadline_beyond_24h_ahead_is_rejected(ahead: timedelta) -> None:
    rejected("deadline", lambda: bounds.deadline(NOW + ahead, NOW))


@pytest.mark.parametrize(
    "ahead", [timedelta(0), -TICK, -timedelta(hours=1)], ids=["now", "-1us", "-1h"]
)
def test_deadline_not_in_the_future_is_rejected(ahead: timedelta) -> None:
    rejected("deadline", lambda: bounds.deadline(NOW + ahead, NOW))


# --- the remaining bounds checks keep one field in error at a time --------------------------


def test_subject_names_the_offending_half() -> None:
    rejected("subject_type", lambda: bounds.subject("j" * 33, "1" * 65))
    rejected("subject_id", lambda: bounds.subject("job", "1" * 65))


@pytest.mark.parametrize("value", ["a\x85b", "a\x9b31mRED", "a\u2028b", "a\u2029b"])
def test_a_line_refuses_c1_controls_and_unicode_line_breaks(value: str) -> None:
    error = rejected_with(
        "title", "control_character", lambda: bounds.single_line("title", value, 99)
    )
    assert "U+" in error.reason


@pytest.mark.parametrize("control", ["\u202a", "\u202d", "\u202e", "\u2066", "\u2069"])
def test_a_line_refuses_the_bidi_controls_that_make_a_name_show_other_than_it_reads(
    control: str,
) -> None:
    value = f"cv{control}fdp.exe"
    error = rejected_with(
        "filename", "control_character", lambda: bounds.single_line("filename", value, 99)
    )
    assert f"U+{ord(control):04X} at character 3" in error.reason
    # Right-to-left text itself, and the marks that order it, stay.
    assert bounds.single_line("title", "מהנדס\u200f (Python)", 99) == "מהנדס\u200f (Python)"
    assert bounds.multi_line("text", f"quoted {control}text", 99) == f"quoted {control}text"


NOTHING_THAT_SHOWS = [
    "\u200b",
    "\ufeff \u200d",
    "\u00ad",
    "\u200e\u200f",
    "\u3164\u3164",  # Hangul fillers
    "\u2800",  # the blank Braille pattern
    "\ufe0f\u034f",  # a variation selector, the combining grapheme joiner
    "\U000e0041\U000e0042",  # tag characters
    "\U0001d173",  # a musical format mark
    "\U000e0100",  # a supplementary variation selector
]


@pytest.mark.parametrize("value", NOTHING_THAT_SHOWS)
def test_a_required_line_of_nothing_that_shows_is_refused(value: str) -> None:
    rejected("title", lambda: bounds.single_line("title", value, 99))
    assert bounds.single_line("title", value, 99, required=False) == value.strip()


def test_text_across_lines_of_nothing_that_shows_is_refused_when_required() -> None:
    rejected("text", lambda: bounds.multi_line("text", "\u200b\n\ufeff", 99))
    assert bounds.multi_line("text", "\u200b", 99, required=False) == "\u200b"


def test_text_of_what_shows_with_marks_that_do_not_is_kept() -> None:
    for value in ("\u2764\ufe0f", "\U0001f3f4\U000e0067\U000e0062\U000e007f", "\u2800x"):
        assert bounds.single_line("title", value, 99) == value


def test_an_owner_outside_a_z_is_told_which_characters_it_may_hold() -> None:
    error = rejected_with("owner", "invalid_argument", lambda: bounds.owner_id("山田"))
    assert "A-Z, a-z, 0-9" in error.reason


def test_text_across_lines_keeps_unicode_line_breaks_and_refuses_c1() -> None:
    assert bounds.multi_line("text", "one\u2028two", 99) == "one\u2028two"
    rejected_with("text", "control_character", lambda: bounds.multi_line("text", "a\x85b", 99))


@pytest.mark.parametrize("code", ["c\x00d", "ç" * 3, "Model_Error", "model error", "a/b"])
def test_a_failure_code_is_a_stable_code_not_text(code: str) -> None:
    """The owner sees it (google.longrunning's ErrorInfo.reason): no control or free text."""
    rejected("failure_code", lambda: bounds.failure(code, ""))


def test_a_claim_names_each_task_type_once_and_at_most_32() -> None:
    names = [f"t{n}" for n in range(32)]
    assert bounds.claim_task_types([*names, "t0", "t5"]) == names
    rejected("task_types", lambda: bounds.claim_task_types([*names, "t32"]))
    rejected("task_type", lambda: bounds.claim_task_types(["ok", "Not OK"]))


def test_failure_names_the_offending_half() -> None:
    rejected("failure_code", lambda: bounds.failure("x" * 65, "m" * 513))
    rejected("failure_message", lambda: bounds.failure("timeout", "m" * 513))


def test_provenance_accepts_all_three_at_their_limits_together() -> None:
    values = ("p" * 32, "m" * 128, "r" * 16)
    assert bounds.provenance(*values) == values
