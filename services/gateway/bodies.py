"""Request bodies: bounded JSON objects, checked field by field.

``json_object`` reads at most ``max_bytes`` (413 beyond), refuses a body
that is not JSON (400 ``malformed_json``), not an object (400), or names a
field outside ``allowed`` (400 ``unknown_field``). A number of more than
``NUMBER_DIGITS_MAX`` digits is refused before Python converts it (400
``number_too_long``: no field takes one, and converting a huge one is slow or
fails), as are ``NaN`` and ``Infinity``, which are not JSON, and a member named
twice in one object (400 naming it: parsers disagree on which one counts, so a
filter in front could read one and this server the other). The ``*_field``
helpers check one member's type and length, and refuse ``null`` for any field
(400 naming it: "absent" is spelt by leaving the member out); ``string_field``
is also the one place a text field of a body is checked for control characters
(400 ``control_character`` naming the field; ``multi_line`` keeps tab, LF and
CR), with the same rule as the services (``bounds.single_line``/``multi_line``).
``no_body`` is for actions that take none: empty, or ``{}``. ``form_fields``
reads an HTML form (``application/x-www-form-urlencoded``), each field at most
once, with the same 413/415/``unknown_field`` answers.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Collection, Mapping
from typing import Any
from urllib.parse import parse_qsl

from starlette.requests import Request

from durable_ops.gateway.problems import Problem, invalid, printable
from durable_ops.model import bounds
from durable_ops.model.errors import InvalidArgument

DEFAULT_MAX_BYTES = 64 * 1024
# How long a body may take to arrive: the largest (a CV, 256 KiB) takes 5 s at 50 kB/s.
# A client that sends less than it announced would otherwise hold its connection for good.
BODY_SECONDS = 30.0
FORM = "application/x-www-form-urlencoded"
# Far beyond any number a request could mean, far below Python's 4,300-digit conversion limit.
NUMBER_DIGITS_MAX = 64
_MALFORMED = "The body is not valid JSON."


def _too_large(max_bytes: int) -> Problem:
    return Problem(413, "payload_too_large", f"The body must be at most {max_bytes:,} bytes.")


def _unsupported_media_type() -> Problem:
    return Problem(415, "unsupported_media_type", "Send the body as application/json.")


async def _read(request: Request, max_bytes: int) -> bytes:
    declared = request.headers.get("content-length", "")
    # ASCII digits only (``"²".isdigit()`` is true) and compared by length first: a
    # 5,000-digit value is too large, not a conversion error.
    if (
        declared.isascii()
        and declared.isdigit()
        and (
            len(significant := declared.lstrip("0")) > len(str(max_bytes))
            or int(significant or "0") > max_bytes
        )
    ):
        raise _too_large(max_bytes)
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(BODY_SECONDS):
            async for chunk in request.stream():
                size += len(chunk)
                if size > max_bytes:
                    raise _too_large(max_bytes)
                chunks.append(chunk)
    except TimeoutError:
        detail = f"The body did not arrive within {BODY_SECONDS:g} seconds."
        raise Problem(408, "request_timeout", detail, headers={"Connection": "close"}) from None
    return b"".join(chunks)


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").partition(";")[0].strip().lower()


def _number_too_long() -> Problem:
    detail = f"The body has a number of more than {NUMBER_DIGITS_MAX} digits."
    return Problem(400, "number_too_long", detail)


def _integer(digits: str) -> int:
    if len(digits.lstrip("-")) > NUMBER_DIGITS_MAX:
        raise _number_too_long()
    return int(digits)


def _number(text: str) -> float:
    if len(text) > NUMBER_DIGITS_MAX + 16:  # digits, sign, point and exponent
        raise _number_too_long()
    return float(text)


def _not_a_number(_name: str) -> Any:
    # ``NaN``, ``Infinity`` and ``-Infinity``: Python's extension, not JSON.
    raise Problem(400, "malformed_json", _MALFORMED)


def _members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    members: dict[str, Any] = {}
    for name, value in pairs:
        if name in members:
            raise invalid(printable(name[:64]), "must be sent once")
        members[name] = value
    return members


def _parse(raw: bytes) -> Any:
    # Not strict: a raw control character inside a string then reaches the field's own
    # check, which names the field, instead of failing the whole body without saying where.
    try:
        return json.loads(
            raw,
            strict=False,
            parse_int=_integer,
            parse_float=_number,
            parse_constant=_not_a_number,
            object_pairs_hook=_members,
        )
    except (UnicodeDecodeError, RecursionError, ValueError):  # JSONDecodeError is a ValueError
        raise Problem(400, "malformed_json", _MALFORMED) from None


def _unknown_field(name: object) -> Problem:
    shown = printable(str(name)[:64])
    return Problem(400, "unknown_field", f"{shown} is not a field of this request.", field=shown)


async def json_object(
    request: Request,
    allowed: Collection[str],
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    optional: bool = False,
) -> dict[str, Any]:
    """The body as a JSON object; with ``optional``, an empty body is ``{}``."""
    raw = await _read(request, max_bytes)
    if optional and not raw.strip():
        return {}
    if _media_type(request) not in ("application/json", ""):
        raise _unsupported_media_type()
    body = _parse(raw)
    if not isinstance(body, dict):
        raise Problem(400, "invalid_body", "The body must be a JSON object.")
    for name in body:
        if name not in allowed:
            raise _unknown_field(name)
    return body


async def form_fields(
    request: Request, allowed: Collection[str], *, max_bytes: int = DEFAULT_MAX_BYTES
) -> dict[str, str]:
    """The fields of a form body, by name; a field sent twice is refused, not guessed at."""
    raw = await _read(request, max_bytes)
    if _media_type(request) != FORM:
        raise Problem(415, "unsupported_media_type", f"Send the body as {FORM}.")
    try:
        pairs = parse_qsl(raw.decode("utf-8"), keep_blank_values=True, errors="strict")
    except (UnicodeDecodeError, ValueError):
        raise Problem(400, "invalid_body", "The body is not a form encoded in UTF-8.") from None
    fields: dict[str, str] = {}
    for name, value in pairs:
        if name not in allowed:
            raise _unknown_field(name)
        if name in fields:
            raise invalid(name, "must be sent once")
        fields[name] = value
    return fields


async def no_body(request: Request) -> None:
    """Accept an empty body or ``{}``; anything else is a client mistake worth reporting."""
    raw = await _read(request, 1024)
    if raw.strip():
        await _check_empty_object(request, raw)


async def _check_empty_object(request: Request, raw: bytes) -> None:
    if _media_type(request) not in ("application/json", ""):
        raise _unsupported_media_type()
    body = _parse(raw)
    if not isinstance(body, dict):
        raise Problem(400, "invalid_body", "The body must be empty or a JSON object.")
    for name in body:
        raise _unknown_field(name)


def _member(body: Mapping[str, Any], name: str, *, required: bool) -> Any:
    """The member ``name``; ``None`` when it is absent and optional. ``null`` is refused."""
    if name not in body:
        if required:
            raise invalid(name, "is required")
        return None
    value = body[name]
    if value is None:
        reason = "must not be null" if required else "must not be null; leave it out instead"
        raise invalid(name, reason)
    return value


def string_field(
    body: Mapping[str, Any],
    name: str,
    *,
    max_length: int,
    required: bool = True,
    multi_line: bool = False,
) -> str | None:
    """The member ``name`` as a string, as sent (the services trim a single line).

    A single-line field (the default) may carry no control character; a
    ``multi_line`` one (a description, a CV's text) keeps tab, LF and CR.
    """
    value = _member(body, name, required=required)
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid(name, "must be a string")
    if len(value) > max_length:
        raise invalid(name, f"must be at most {max_length:,} characters")
    if required and bounds.blank(value):
        raise invalid(name, "must not be empty")
    check = bounds.multi_line if multi_line else bounds.single_line
    try:
        check(name, value, max_length, required=False)
    except InvalidArgument as exc:
        raise invalid(name, exc.reason, code=exc.code) from None
    return value


def bool_field(body: Mapping[str, Any], name: str, *, required: bool = True) -> bool | None:
    value = _member(body, name, required=required)
    if value is None:
        return None
    if not isinstance(value, bool):
        raise invalid(name, "must be true or false")
    return value
