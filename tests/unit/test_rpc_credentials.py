"""Service credentials, the verification cache, scopes from metadata, and the caller side."""

from __future__ import annotations

import base64
import contextvars
import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from typing import Any, cast

import jwt
import pytest

from durable_ops.model.errors import InvalidArgument, PermissionDenied, Unauthenticated
from durable_ops.model.scope import NeutralScope, OperatorScope, OwnerScope, Role
from durable_ops.rpc import ServicerContext, client, credentials
from durable_ops.rpc.client import ServiceCaller
from durable_ops.rpc.credentials import mint_service_token, verify_service_token
from durable_ops.rpc.scope import caller_scope, role_from_metadata, scope_for

SECRET = "unit-test-service-secret-" + "0123456789abcdef" * 3


@pytest.fixture(autouse=True)
def _empty_cache() -> Iterator[None]:
    credentials._cache.clear()
    yield
    credentials._cache.clear()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _forged(header: dict[str, Any], claims: dict[str, Any], signature: bytes = b"") -> str:
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    return f"{signing_input}.{_b64(signature)}"


def _claims(**overrides: Any) -> dict[str, Any]:
    now = int(time.time())
    claims: dict[str, Any] = {"role": "gateway", "iat": now, "exp": now + 60, "iss": "durable-ops"}
    claims.update(overrides)
    return {k: v for k, v in claims.items() if v is not None}


@pytest.mark.parametrize("role", list(Role))
def test_a_minted_token_verifies_as_its_role(role: Role) -> None:
    assert verify_service_token(SECRET, mint_service_token(SECRET, role)) is role


def test_minted_claims_carry_role_issuer_and_expiry() -> None:
    token = mint_service_token(SECRET, Role.WORKER, ttl_seconds=120)
    claims = jwt.decode(token, SECRET, algorithms=["HS256"])
    assert claims["role"] == "worker"
    assert claims["iss"] == "durable-ops"
    assert claims["exp"] - claims["iat"] == 120
    assert jwt.get_unverified_header(token)["alg"] == "HS256"


def test_another_secret_is_refused() -> None:
    token = mint_service_token("another-secret-of-sufficient-length-xyz", Role.GATEWAY)
    with pytest.raises(Unauthenticated):
        verify_service_token(SECRET, token)


def test_alg_none_is_refused() -> None:
    with pytest.raises(Unauthenticated):
        verify_service_token(SECRET, _forged({"alg": "none", "typ": "JWT"}, _claims()))


def test_hs384_signed_with_the_right_secret_is_refused() -> None:
    token = jwt.encode(_claims(), SECRET, algorithm="HS384")
    with pytest.raises(Unauthenticated):
        verify_service_token(SECRET, token)


def test_rs256_header_with_an_hmac_signature_is_refused() -> None:
    # The classic algorithm-confusion forgery: only a pinned algorithm list stops it.
    header = {"alg": "RS256", "typ": "JWT"}
    unsigned = _forged(header, _claims()).rsplit(".", 1)[0]
    signature = hmac.new(SECRET.encode(), unsigned.encode(), hashlib.sha256).digest()
    with pytest.raises(Unauthenticated):
        verify_service_token(SECRET, f"{unsigned}.{_b64(signature)}")


@pytest.mark.parametrize(
    "claims",
    [
        pytest.param(_claims(exp=None), id="no-exp"),
        pytest.param(_claims(exp=int(time.time()) - 3600), id="expired"),
        pytest.param(_claims(role="admin"), id="unknown-role"),
        pytest.param(_claims(role=None), id="no-role"),
        pytest.param(_claims(iss="someone-else"), id="wrong-issuer"),
        pytest.param(_claims(iss=None), id="no-issuer"),
    ],
)
def test_incomplete_or_foreign_claims_are_refused(claims: dict[str, Any]) -> None:
    with pytest.raises(Unauthenticated):
        verify_service_token(SECRET, jwt.encode(claims, SECRET, algorithm="HS256"))


def test_garbage_is_refused() -> None:
    with pytest.raises(Unauthenticated):
        verify_service_token(SECRET, "not.a.jwt")


DAY = 24 * 3600


def _signed(**overrides: Any) -> str:
    return jwt.encode(_claims(**overrides), SECRET, algorithm="HS256")


@pytest.mark.parametrize(
    ("issued_ago", "lifetime"),
    [
        pytest.param(DAY + 3600, DAY + 7200, id="issued-25h-ago-still-unexpired"),
        pytest.param(30 * DAY, 31 * DAY, id="a-month-old"),
        pytest.param(0, 2 * DAY, id="minted-for-two-days"),
        pytest.param(0, 10 * 365 * DAY, id="minted-for-ten-years"),
        pytest.param(-DAY, 3600, id="issued-tomorrow"),
    ],
)
def test_a_credential_past_the_maximum_lifetime_is_refused(issued_ago: int, lifetime: int) -> None:
    """24 h by default: whatever ``exp`` says, an old or long-lived credential is refused."""
    iat = int(time.time()) - issued_ago
    token = _signed(iat=iat, exp=iat + lifetime)
    with pytest.raises(Unauthenticated) as refused:
        verify_service_token(SECRET, token)
    assert refused.value.code == "invalid_service_credential"


def test_a_credential_within_the_maximum_lifetime_is_accepted() -> None:
    iat = int(time.time()) - DAY + 60
    assert verify_service_token(SECRET, _signed(iat=iat, exp=iat + DAY)) is Role.GATEWAY
    assert verify_service_token(SECRET, mint_service_token(SECRET, Role.WORKER, DAY)) is Role.WORKER


def test_the_maximum_lifetime_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPS_SERVICE_CREDENTIAL_MAX_AGE_SECONDS", "600")
    credentials.configured_max_age_seconds.cache_clear()
    try:
        assert credentials.configured_max_age_seconds() == 600
        with pytest.raises(Unauthenticated):
            verify_service_token(SECRET, mint_service_token(SECRET, Role.WORKER, 601))
        iat = int(time.time()) - 700
        with pytest.raises(Unauthenticated):
            verify_service_token(SECRET, _signed(iat=iat, exp=iat + 600))
        assert verify_service_token(SECRET, mint_service_token(SECRET, Role.WORKER, 600))
    finally:
        credentials.configured_max_age_seconds.cache_clear()
    # An explicit bound wins over the setting.
    assert verify_service_token(SECRET, _signed(), max_age_seconds=60) is Role.GATEWAY
    with pytest.raises(Unauthenticated):
        verify_service_token(SECRET, _signed(exp=int(time.time()) + 120), max_age_seconds=60)


def _count_decodes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real_decode = jwt.decode

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real_decode(*args, **kwargs)

    monkeypatch.setattr(jwt, "decode", counting)
    return calls


def test_verification_is_cached_until_the_token_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_decodes(monkeypatch)
    now = [time.time()]
    cache = credentials._VerifiedTokens(clock=lambda: now[0], max_age=3600)
    monkeypatch.setattr(credentials, "_cache", cache)
    token = mint_service_token(SECRET, Role.WORKER, ttl_seconds=30)

    verify_service_token(SECRET, token)
    verify_service_token(SECRET, token)
    assert len(calls) == 1

    now[0] += 31  # past exp: the cache must not vouch for it any more
    verify_service_token(SECRET, token)
    assert len(calls) == 2


def test_a_cached_token_does_not_pass_under_another_secret() -> None:
    token = mint_service_token(SECRET, Role.GATEWAY)
    verify_service_token(SECRET, token)
    with pytest.raises(Unauthenticated):
        verify_service_token("a-different-secret-that-is-long-enough", token)


def test_the_cache_is_bounded_and_evicts_the_least_recently_used() -> None:
    cache = credentials._VerifiedTokens(capacity=2)
    far = time.time() + 600
    cache.put(("s", "a"), Role.GATEWAY, far)
    cache.put(("s", "b"), Role.WORKER, far)
    assert cache.get(("s", "a")) is Role.GATEWAY  # "a" is now the most recent
    cache.put(("s", "c"), Role.PRODUCER, far)
    assert cache.get(("s", "b")) is None
    assert cache.get(("s", "a")) is Role.GATEWAY
    assert cache.get(("s", "c")) is Role.PRODUCER


def _bearer(role: Role) -> tuple[str, str]:
    return ("authorization", f"Bearer {mint_service_token(SECRET, role)}")


def test_role_from_metadata_reads_one_bearer_credential() -> None:
    assert role_from_metadata([_bearer(Role.PRODUCER), ("x-owner-id", "u1")], SECRET) is (
        Role.PRODUCER
    )


@pytest.mark.parametrize(
    "metadata",
    [
        pytest.param([], id="missing"),
        pytest.param([("authorization", "Bearer ")], id="empty-token"),
        pytest.param(
            [("authorization", "Basic " + mint_service_token(SECRET, Role.GATEWAY))],
            id="not-bearer",
        ),
        pytest.param([_bearer(Role.GATEWAY), _bearer(Role.WORKER)], id="two-credentials"),
    ],
)
def test_role_from_metadata_refuses_missing_or_ambiguous_credentials(
    metadata: list[tuple[str, str]],
) -> None:
    with pytest.raises(Unauthenticated):
        role_from_metadata(metadata, SECRET)


@pytest.mark.parametrize("role", [role for role in Role if role is not Role.OPERATOR])
def test_x_owner_id_gives_an_owner_scope_for_every_role(role: Role) -> None:
    assert scope_for(role, [("x-owner-id", "alice@example.org")]) == OwnerScope(
        role, "alice@example.org"
    )


def test_the_operator_role_has_only_the_operator_scope() -> None:
    assert scope_for(Role.OPERATOR, []) == OperatorScope()
    with pytest.raises(PermissionDenied) as refused:
        scope_for(Role.OPERATOR, [("x-owner-id", "alice")])
    assert refused.value.code == "operator_scope_has_no_owner"


def test_a_worker_without_x_owner_id_is_neutral() -> None:
    assert scope_for(Role.WORKER, []) == NeutralScope()


@pytest.mark.parametrize("role", [Role.GATEWAY, Role.PRODUCER])
def test_gateway_and_producer_need_x_owner_id(role: Role) -> None:
    with pytest.raises(PermissionDenied):
        scope_for(role, [])


@pytest.mark.parametrize(
    "owners",
    [
        pytest.param(["alice", "bob"], id="two-different"),
        pytest.param(["alice", "alice"], id="two-equal"),
        pytest.param([""], id="empty"),
        pytest.param(["alice bob"], id="space"),
        pytest.param(["a" * 65], id="too-long"),
    ],
)
def test_malformed_x_owner_id_is_an_invalid_argument(owners: list[str]) -> None:
    # A worker must not fall back to the neutral scope when its owner header is unusable.
    with pytest.raises(InvalidArgument):
        scope_for(Role.WORKER, [("x-owner-id", owner) for owner in owners])


def test_service_caller_metadata_carries_a_valid_credential_and_the_owner() -> None:
    caller = ServiceCaller(SECRET, Role.GATEWAY)
    assert len(caller.metadata()) == 1
    metadata = caller.metadata("alice")
    assert dict(metadata)["x-owner-id"] == "alice"
    assert role_from_metadata(metadata, SECRET) is Role.GATEWAY


def test_service_caller_renews_its_token_before_expiry(monkeypatch: pytest.MonkeyPatch) -> None:
    minted: list[int] = []

    def mint(secret: str, role: Role, ttl_seconds: int) -> str:
        minted.append(ttl_seconds)
        return f"token-{len(minted)}"

    monkeypatch.setattr(client, "mint_service_token", mint)
    now = [1000.0]
    caller = ServiceCaller(SECRET, Role.WORKER, ttl_seconds=300, clock=lambda: now[0])

    assert caller.token() == "token-1"
    now[0] += 150
    assert caller.token() == "token-1"  # still far from expiry: reused
    now[0] += 60  # 210 s old, 90 s left: renewed before it can expire mid-call
    assert caller.token() == "token-2"
    assert minted == [300, 300]


def test_caller_scope_fails_closed_without_the_credential_interceptor() -> None:
    class Context:
        def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
            return (("x-owner-id", "alice"),)

    # Run in a fresh context, as a handler reached without the interceptor would be.
    with pytest.raises(Unauthenticated):
        contextvars.Context().run(caller_scope, cast(ServicerContext, Context()))
