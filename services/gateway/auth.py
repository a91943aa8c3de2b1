"""User authentication (SPEC §2): an HS256 JWT as a bearer header, or the ``ops_session``
cookie of a server-side session (``gateway.sessions``).

``mint_user_token`` makes a token (``opsctl token`` calls it); ``verify_user_token``
checks one; ``require_user`` is what a route calls first: it answers 401 for a
missing, malformed, expired, wrongly signed or ``alg: none`` token and 403
for a cookie-authenticated state change from another origin (CSRF), or one
that names no origin at all: a write the cookie authenticates must carry an
``Origin`` or a ``Referer`` of this host (browsers send ``Origin`` with every
POST, PUT, PATCH and DELETE; a client that sends neither uses a bearer
token). A user token lives at most ``MAX_USER_TOKEN_SECONDS`` (30 days,
``exp`` - ``iat``): a longer one is neither minted nor accepted, so a token
minted long-lived before the cap stops working. The cookie carries only the
opaque id of a session the Workspace service keeps, which lives at most
``SESSION_COOKIE_MAX_AGE_SECONDS`` (7 days), whatever the token's ``exp``, and
ends at logout. Each request resolves its credential there (one RPC, one
primary-key read): the cookie's session, or whether ``opsctl sessions revoke``
came after a bearer token's ``iat``; for a read, the latter beside the read's own
calls (``gateway.standing``, ADR 54). Any
identity header a client sends (``x-owner-id`` and the like) is never read:
the owner is the verified ``sub`` and nothing else.

A page of the web UI says whom it was rendered for (``X-Ops-Page-User``, or the event
stream's ``page_user``, which an EventSource cannot send as a header): the cookie is the
browser's, not the tab's, so a tab kept open across a sign-in as someone else would
otherwise act as them. One that names another user than the credential's is 409
``page_user_changed`` and does nothing; without it nothing is compared (API clients).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

import jwt
from starlette.requests import Request
from starlette.responses import Response

from durable_ops.gateway import sessions, standing
from durable_ops.gateway.backends import Backends
from durable_ops.gateway.context import backends_of, settings_of
from durable_ops.gateway.problems import Problem, one_header
from durable_ops.model import bounds
from durable_ops.model.errors import InvalidArgument
from durable_ops.settings import Settings

ALGORITHM = "HS256"
SESSION_COOKIE = "ops_session"
CLOCK_LEEWAY_SECONDS = 10
MAX_TOKEN_LENGTH = 4096
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SESSION_COOKIE_MAX_AGE_SECONDS = 7 * 24 * 3600
# A leaked token is good until it expires or its user's tokens are revoked: its life is
# capped, and a token without ``exp`` and ``iat`` has no life to check.
MAX_USER_TOKEN_SECONDS = 30 * 24 * 3600
# ``none``: the user typed the address or followed a bookmark, which a forger cannot arrange.
SAME_ORIGIN_FETCH_SITES = frozenset({"same-origin", "none"})
PAGE_USER_HEADER = "X-Ops-Page-User"
PAGE_USER_PARAMETER = "page_user"  # the event stream's: an EventSource sends no header
PAGE_USER_CHANGED = (
    "This page was opened as another user; this browser is now signed in as someone else."
    " Reload the page to continue."
)


@dataclass(frozen=True)
class User:
    id: str
    via: Literal["bearer", "cookie"]
    check: standing.Check | None = None  # whether the credential stands, when still asked


class InvalidToken(Exception):
    """The token is not one this gateway accepts; the reason stays server-side."""


def mint_user_token(
    secret: str,
    user_id: str,
    ttl_seconds: int = 3600,
    *,
    issuer: str = "",
    audience: str = "",
) -> str:
    """A user JWT: HS256, ``sub`` = ``user_id``, ``iat`` and ``exp``, ``iss``/``aud`` when given.

    Raises ``InvalidArgument`` for a user id outside ``bounds.owner_id`` or a ttl
    outside 1 … ``MAX_USER_TOKEN_SECONDS``.
    """
    bounds.owner_id(user_id)
    if not 1 <= ttl_seconds <= MAX_USER_TOKEN_SECONDS:
        raise InvalidArgument(
            "ttl_seconds", f"must be between 1 and {MAX_USER_TOKEN_SECONDS} (30 days)"
        )
    now = int(time.time())
    claims: dict[str, Any] = {"sub": user_id, "iat": now, "exp": now + ttl_seconds}
    if issuer:
        claims["iss"] = issuer
    if audience:
        claims["aud"] = audience
    return jwt.encode(claims, secret, algorithm=ALGORITHM)


def verify_user_token(secret: str, token: str, *, issuer: str = "", audience: str = "") -> str:
    """The user id (``sub``) of a valid token, else ``InvalidToken``.

    Only HS256 is accepted (``alg: none`` and every other algorithm are refused),
    ``exp`` and ``iat`` are required, at most ``MAX_USER_TOKEN_SECONDS`` apart (PyJWT
    refuses an ``iat`` in the future), and ``iss``/``aud`` are checked when configured.
    """
    if not token or len(token) > MAX_TOKEN_LENGTH:
        raise InvalidToken("missing or oversized token")
    required = ["exp", "iat", "sub"] + (["iss"] if issuer else []) + (["aud"] if audience else [])
    try:
        claims = jwt.decode(
            token,
            secret,
            algorithms=[ALGORITHM],
            issuer=issuer or None,
            audience=audience or None,
            leeway=CLOCK_LEEWAY_SECONDS,
            options={"require": required, "verify_aud": bool(audience)},
        )
        if not all(_numeric_date(claims[name]) for name in ("exp", "iat")):
            raise InvalidToken("exp and iat must be numbers (RFC 7519's NumericDate)")
        if int(claims["exp"]) - int(claims["iat"]) > MAX_USER_TOKEN_SECONDS:
            raise InvalidToken("lives longer than 30 days")
        subject = claims["sub"]
        if not isinstance(subject, str):
            raise InvalidToken("sub is not a string")
        return bounds.owner_id(subject)
    except (jwt.PyJWTError, InvalidArgument, KeyError, TypeError, ValueError) as exc:
        raise InvalidToken(type(exc).__name__) from exc


def _numeric_date(value: object) -> bool:
    # PyJWT reads a numeric string too ("exp": " 1796… "); bool is an int in Python only.
    return isinstance(value, int | float) and not isinstance(value, bool)


def verify_with_settings(settings: Settings, token: str) -> str:
    """Verify with the current secret, then with each earlier one (a rotation in progress)."""
    refusal = InvalidToken("no secret")
    for secret in settings.jwt_verification_secrets:
        try:
            return verify_user_token(
                secret, token, issuer=settings.jwt_issuer, audience=settings.jwt_audience
            )
        except InvalidToken as error:
            refusal = error
    raise refusal


def _unauthenticated(detail: str) -> Problem:
    return Problem(
        401, "unauthenticated", detail, headers={"WWW-Authenticate": 'Bearer realm="durable-ops"'}
    )


def _credential(request: Request) -> tuple[str, Literal["bearer", "cookie"]] | None:
    header = request.headers.getlist("authorization")
    if len(header) > 1:
        raise _unauthenticated("send one Authorization header")
    if header:
        scheme, _, token = header[0].partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _unauthenticated("use Authorization: Bearer <token>")
        return token.strip(), "bearer"
    cookie = request.cookies.get(SESSION_COOKIE)
    if cookie:
        return cookie, "cookie"
    return None


async def authenticate(request: Request, *, defer_check: bool = False) -> User | None:
    """The caller, ``None`` when no credential was sent; 401 ``Problem`` for a bad one.

    With ``defer_check``, a bearer token on a safe method is answered once its
    signature is verified, and whether it was revoked is asked beside the request's
    own calls (``standing``): ``User.check`` is that question, pending.
    """
    credential = _credential(request)
    if credential is None:
        return None
    value, via = credential
    backends = backends_of(request)
    if via == "cookie":
        try:
            return User(await sessions.resolve_cookie(backends, value), via)
        except sessions.Ended:
            raise _unauthenticated("the session has ended: sign in again") from None
    try:
        user_id = verify_with_settings(settings_of(request), value)
    except InvalidToken:
        raise _refused_token() from None
    stands = _token_stands(backends, user_id, token_issued_at(value))
    if defer_check and request.method in SAFE_METHODS:
        return User(user_id, via, standing.defer(request, stands))
    await stands
    return User(user_id, via)


def _refused_token() -> Problem:
    return _unauthenticated("the token is invalid, expired or revoked")


async def _token_stands(backends: Backends, user_id: str, issued_at: int) -> None:
    try:
        await sessions.check_token(backends, user_id, issued_at)
    except sessions.Ended:
        raise _refused_token() from None


def _cross_origin() -> Problem:
    return Problem(403, "cross_origin_request", "cross-origin requests are refused")


def check_same_origin(
    request: Request, *, require_origin: bool = False, bearer_accepted: bool = True
) -> None:
    """403 unless an ``Origin``/``Sec-Fetch-Site`` sent with the request names this origin.

    With ``require_origin``, a request naming no origin at all (neither ``Origin`` nor
    ``Referer``) is refused too (403 ``origin_required``); a ``Referer`` then counts only
    when ``Origin`` is absent, and only when it is of this host. That refusal offers a
    bearer token instead only where the route takes one: not ``bearer_accepted`` (the
    operator console), it names the ``Origin`` header alone.
    """
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site.lower() not in SAME_ORIGIN_FETCH_SITES:
        raise _cross_origin()
    origin = request.headers.get("origin")
    if origin is not None:
        if not _is_own_host(origin, request):
            raise _cross_origin()
        return
    if not require_origin:
        return
    referer = request.headers.get("referer")
    if referer is None:
        if bearer_accepted:
            detail = (
                "a change signed in by the session cookie must say where it comes from:"
                " send the Origin header (browsers do), or use a bearer token"
            )
        else:
            detail = "a change must say where it comes from: send the Origin header (browsers do)"
        raise Problem(403, "origin_required", detail)
    if not _is_own_host(referer, request):
        raise _cross_origin()


def _is_own_host(origin: str, request: Request) -> bool:
    """``Origin`` (or the origin of a ``Referer`` URL) names the host the request was sent to.

    The scheme is not compared: behind a TLS-terminating proxy the browser says
    ``https`` while this process sees ``http``; the host (and port) still differ
    for every other site. ``Origin: null`` (sandboxed or opaque) never matches.
    """
    host = request.headers.get("host", "")
    try:
        parsed = urlsplit(origin)
    except ValueError:
        return False
    return parsed.scheme in ("http", "https") and bool(host) and parsed.netloc == host


async def require_user(request: Request, *, defer_check: bool = False) -> User:
    """The authenticated caller of an API route (the auth "dependency" every route calls);
    ``defer_check`` as ``authenticate`` takes it."""
    user = await authenticate(request, defer_check=defer_check)
    if user is None:
        raise _unauthenticated("sign in: send a bearer token or the session cookie")
    if user.via == "cookie" and request.method not in SAFE_METHODS:
        check_same_origin(request, require_origin=True)
    check_page_user(user, one_header(request, PAGE_USER_HEADER))
    return user


def check_page_user(user: User, page_user: str | None) -> None:
    """409 ``page_user_changed`` unless ``page_user`` (the user a page was rendered for, as
    it says it: ``PAGE_USER_HEADER`` or ``PAGE_USER_PARAMETER``) is absent or ``user``.
    Neither user is named: the page's reader may be the other one."""
    if page_user is not None and page_user != user.id:
        raise Problem(409, "page_user_changed", PAGE_USER_CHANGED)


async def still_signed_in(request: Request, user: User) -> bool:
    """Whether ``request``'s credential still signs ``user`` in, asked again (a stream that
    runs on after its start); raises ``Unavailable`` when the Workspace cannot say."""
    try:
        again = await authenticate(request)
    except Problem:  # ended, expired or revoked
        return False
    return again is not None and again.id == user.id


async def session_user(request: Request) -> str | None:
    """For pages: the cookie's user, or ``None`` when there is no live session."""
    session_id = request.cookies.get(SESSION_COOKIE)
    if not session_id:
        return None
    try:
        return await sessions.resolve_cookie(backends_of(request), session_id)
    except sessions.Ended:
        return None


def token_lifetime(token: str) -> int:
    """Seconds until ``exp`` of a token that ``verify_user_token`` accepted."""
    claims = jwt.decode(token, options={"verify_signature": False})
    return max(1, int(claims["exp"]) - int(time.time()))


def token_issued_at(token: str) -> int:
    """``iat`` (Unix seconds) of a token that ``verify_user_token`` accepted."""
    claims = jwt.decode(token, options={"verify_signature": False})
    return int(claims["iat"])


def session_lifetime(max_age: int) -> int:
    """``max_age`` seconds, held to 1 … 7 days: a session's and its cookie's life."""
    return max(1, min(max_age, SESSION_COOKIE_MAX_AGE_SECONDS))


def set_session_cookie(response: Response, request: Request, session_id: str, max_age: int) -> None:
    """The cookie of session ``session_id``, for ``max_age`` seconds and at most 7 days."""
    response.set_cookie(
        SESSION_COOKIE,
        session_id,
        max_age=session_lifetime(max_age),
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def clear_session_cookie(response: Response, request: Request) -> None:
    response.delete_cookie(
        SESSION_COOKIE,
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
