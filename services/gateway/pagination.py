"""Query strings and list pages: ``page_size`` (``bounds.PAGE_SIZE_RANGE``), a ``page_token``.

``query_params`` reads a route's query string strictly, by one rule for every route
that takes parameters (the owners' API and the console alike; a route that takes
none does not read its query string): an unknown parameter is a 400
``unknown_parameter`` (a misspelt filter must not silently widen a list), a repeated
one a 400 ``invalid_argument``, and each value is a line of text (SPEC §5) of at most
``PAGE_TOKEN_MAX`` characters (the longest a value has reason to be): a control
character or line break in it is a 400 ``control_character`` naming the parameter,
before any route parses it or searches for it;
``page_request`` parses the two paging parameters; ``list_body`` shapes
``{"items": [...], "next_page_token": "..."|null}``.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from durable_ops.gateway.problems import Problem, invalid
from durable_ops.model import bounds
from durable_ops.model.bounds import PAGE_SIZE_DEFAULT, PAGE_TOKEN_MAX
from durable_ops.model.errors import InvalidArgument

PAGING_PARAMETERS = ("page_size", "page_token")
_TOKEN = re.compile(r"[A-Za-z0-9_=-]+")


@dataclass(frozen=True)
class PageRequest:
    size: int
    token: str


def query_params(request: Request, allowed: Collection[str]) -> dict[str, str]:
    """The query string as a dict, values as sent; 400 for a parameter not in ``allowed``,
    sent twice, or whose value is not a line of text (see the module's docstring)."""
    found: dict[str, str] = {}
    for name, value in request.query_params.multi_items():
        if name not in allowed:
            raise Problem(
                400,
                "unknown_parameter",
                f"{name[:64]} is not a query parameter of this route",
                field=name[:64],
            )
        if name in found:
            raise invalid(name, "must appear at most once")
        try:
            bounds.single_line(name, value, PAGE_TOKEN_MAX, required=False)
        except InvalidArgument as exc:
            raise invalid(name, exc.reason, code=exc.code) from None
        found[name] = value
    return found


def page_request(params: Mapping[str, str]) -> PageRequest:
    raw_size = params.get("page_size", "")
    size = PAGE_SIZE_DEFAULT
    if raw_size:
        if not (raw_size.isascii() and raw_size.isdigit() and len(raw_size) <= 3):
            raise invalid("page_size", bounds.PAGE_SIZE_RULE)
        try:
            size = bounds.page_size(int(raw_size))
        except InvalidArgument as exc:
            raise invalid("page_size", exc.reason) from None
    token = params.get("page_token", "")
    if len(token) > PAGE_TOKEN_MAX or (token and not _TOKEN.fullmatch(token)):
        raise invalid("page_token", "is not a token this server issued")
    return PageRequest(size, token)


def list_body(items: list[dict[str, Any]], next_page_token: str) -> dict[str, Any]:
    return {"items": items, "next_page_token": next_page_token or None}
