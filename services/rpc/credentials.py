"""Service credentials: short-lived EdDSA JWTs, each signed with its process's own key.

The signer's role is the role of the key that verifies the credential (``keys``,
found by the header's ``kid``): a ``role`` claim is not needed, and one that names
another role than the key's is refused. Every RPC carries a credential, so
verification results are cached (bounded LRU keyed by token, never past the
token's ``exp``, and at most a minute, so a deleted key stops working within it).

A credential has a bounded life whatever its ``exp`` says: one minted to live
longer than ``OPS_SERVICE_CREDENTIAL_MAX_AGE_SECONDS`` (24 h by default), or
older than that by its ``iat``, is refused like a forged one. A leaked or
hand-minted long-lived token is then worth at most that long; the callers'
own tokens live ``DEFAULT_TTL_SECONDS`` and are renewed well before.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

import jwt

from durable_ops.model.errors import Unauthenticated
from durable_ops.rpc.keys import SigningKey, TrustedKey, TrustedKeys
from durable_ops.settings import Settings

ISSUER = "durable-ops"
ALGORITHM = "EdDSA"  # RFC 8037, Ed25519 keys
DEFAULT_TTL_SECONDS = 300
# Processes on different hosts may disagree on the time by a few seconds.
CLOCK_LEEWAY_SECONDS = 10
_REQUIRED_CLAIMS = ["iat", "exp", "iss"]


@functools.cache
def configured_max_age_seconds() -> float:
    """``OPS_SERVICE_CREDENTIAL_MAX_AGE_SECONDS``, read once per process."""
    return float(Settings.from_env().service_credential_max_age_seconds)


def mint_service_token(
    key: SigningKey, ttl_seconds: int = DEFAULT_TTL_SECONDS, *, subject: str = ""
) -> str:
    """A credential signed with ``key``; ``subject`` (``sub``, default the key's name)
    names who holds it, for audit logs."""
    now = int(time.time())
    claims: dict[str, str | int] = {
        "sub": subject or key.name,
        "iat": now,
        "exp": now + ttl_seconds,
        "iss": ISSUER,
    }
    return jwt.encode(claims, key.private_key, algorithm=ALGORITHM, headers={"kid": key.kid})


class _VerifiedTokens:
    """A small LRU of verified tokens, each with the key that signed it; an entry lives until
    its token expires or ``max_age``."""

    def __init__(
        self, capacity: int = 512, max_age: float = 60.0, clock: Callable[[], float] = time.time
    ) -> None:
        self._capacity = capacity
        self._max_age = max_age
        self._clock = clock
        self._entries: OrderedDict[str, tuple[TrustedKey, float]] = OrderedDict()
        # grpc may run sync handlers on pool threads; the dict must stay consistent.
        self._lock = threading.Lock()

    def get(self, token: str) -> TrustedKey | None:
        with self._lock:
            entry = self._entries.get(token)
            if entry is None:
                return None
            signer, valid_until = entry
            if self._clock() >= valid_until:
                del self._entries[token]
                return None
            self._entries.move_to_end(token)
            return signer

    def put(self, token: str, signer: TrustedKey, exp: float) -> None:
        valid_until = min(exp, self._clock() + self._max_age)
        with self._lock:
            self._entries[token] = (signer, valid_until)
            self._entries.move_to_end(token)
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


_cache = _VerifiedTokens()


def _refused() -> Unauthenticated:
    # The reason stays server-side: telling a caller why its token failed helps forgers.
    return Unauthenticated("invalid service credential", code="invalid_service_credential")


def verify_service_token(
    trusted: TrustedKeys, token: str, *, max_age_seconds: float | None = None
) -> TrustedKey:
    """The trusted key that signed ``token`` (its role is the caller's), or
    ``Unauthenticated`` for anything but a valid EdDSA credential from a trusted key.

    ``max_age_seconds`` (default: the setting) bounds a credential's life: minted for
    longer (``exp - iat``), or issued longer ago than that (``iat``), it is refused.
    It is one value per process: a cached verdict lasts no longer than it allows.
    """
    max_age = configured_max_age_seconds() if max_age_seconds is None else max_age_seconds
    cached = _cache.get(token)
    if cached is not None:
        return cached
    try:
        kid = jwt.get_unverified_header(token).get("kid")
        key = trusted.find(kid) if isinstance(kid, str) else None
        if key is None:
            raise _refused()
        claims = jwt.decode(
            token,
            key.public_key,
            algorithms=[ALGORITHM],  # pinned: refuses alg none, HS256 with a public key...
            issuer=ISSUER,
            leeway=CLOCK_LEEWAY_SECONDS,
            options={"require": _REQUIRED_CLAIMS},
        )
        issued_at, expires_at = float(claims["iat"]), float(claims["exp"])
    except (jwt.PyJWTError, ValueError, TypeError) as exc:
        raise _refused() from exc
    if claims.get("role", key.role.value) != key.role.value:
        raise _refused()  # a key speaks only for its own role
    # PyJWT has refused an ``iat`` in the future, so with ``exp`` bounded by ``iat`` the
    # credential is also never used more than ``max_age`` after it was issued; the age is
    # checked as well, so the rule reads as stated.
    if expires_at - issued_at > max_age:
        raise _refused()  # minted to outlive the bound
    if time.time() >= issued_at + max_age + CLOCK_LEEWAY_SECONDS:
        raise _refused()  # issued too long ago
    _cache.put(token, key, expires_at)
    return key
