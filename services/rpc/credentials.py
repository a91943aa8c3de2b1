"""Service credentials: short-lived HS256 JWTs signed with ``OPS_SERVICE_SECRET``.

Every RPC carries one, so verification results are cached (bounded LRU keyed by
secret and token, never past the token's ``exp``).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

import jwt

from durable_ops.model.errors import Unauthenticated
from durable_ops.model.scope import Role

ISSUER = "durable-ops"
ALGORITHM = "HS256"
DEFAULT_TTL_SECONDS = 300
# Processes on different hosts may disagree on the time by a few seconds.
CLOCK_LEEWAY_SECONDS = 10
_REQUIRED_CLAIMS = ["role", "iat", "exp", "iss"]


def mint_service_token(secret: str, role: Role, ttl_seconds: int = DEFAULT_TTL_SECONDS) -> str:
    now = int(time.time())
    claims = {"role": role.value, "iat": now, "exp": now + ttl_seconds, "iss": ISSUER}
    return jwt.encode(claims, secret, algorithm=ALGORITHM)


class _VerifiedTokens:
    """A small LRU of verified tokens; an entry lives until its token expires or ``max_age``."""

    def __init__(
        self, capacity: int = 512, max_age: float = 60.0, clock: Callable[[], float] = time.time
    ) -> None:
        self._capacity = capacity
        self._max_age = max_age
        self._clock = clock
        self._entries: OrderedDict[tuple[str, str], tuple[Role, float]] = OrderedDict()
        # grpc may run sync handlers on pool threads; the dict must stay consistent.
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str]) -> Role | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            role, valid_until = entry
            if self._clock() >= valid_until:
                del self._entries[key]
                return None
            self._entries.move_to_end(key)
            return role

    def put(self, key: tuple[str, str], role: Role, exp: float) -> None:
        valid_until = min(exp, self._clock() + self._max_age)
        with self._lock:
            self._entries[key] = (role, valid_until)
            self._entries.move_to_end(key)
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


_cache = _VerifiedTokens()


def verify_service_token(secret: str, token: str) -> Role:
    """The caller's role, or ``Unauthenticated`` for anything but a valid HS256 credential."""
    key = (secret, token)
    cached = _cache.get(key)
    if cached is not None:
        return cached
    try:
        claims = jwt.decode(
            token,
            secret,
            algorithms=[ALGORITHM],  # pinned: refuses alg none, HS384, RS256...
            issuer=ISSUER,
            leeway=CLOCK_LEEWAY_SECONDS,
            options={"require": _REQUIRED_CLAIMS},
        )
        role = Role(claims["role"])
    except (jwt.PyJWTError, ValueError, TypeError) as exc:
        # The reason stays server-side: telling a caller why its token failed helps forgers.
        raise Unauthenticated(
            "invalid service credential", code="invalid_service_credential"
        ) from exc
    _cache.put(key, role, float(claims["exp"]))
    return role
