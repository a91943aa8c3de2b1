"""Service keys and credentials, the verification cache, scopes from metadata, and the caller
side."""

from __future__ import annotations

import base64
import contextvars
import hashlib
import hmac
import json
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from structlog.testing import capture_logs

from durable_ops.model.errors import InvalidArgument, PermissionDenied, Unauthenticated
from durable_ops.model.scope import NeutralScope, OperatorScope, OwnerScope, Role
from durable_ops.rpc import ServicerContext, client, credentials
from durable_ops.rpc.client import ServiceCaller
from durable_ops.rpc.credentials import mint_service_token, verify_service_token
from durable_ops.rpc.keys import (
    RESCAN_SECONDS,
    SigningKey,
    TrustedKeys,
    create_key_pair,
    private_key_path,
    trusted_keys,
)
from durable_ops.rpc.scope import caller_scope, key_from_metadata, scope_for
from durable_ops.settings import Settings, SettingsError


@pytest.fixture(autouse=True)
def _empty_cache() -> Iterator[None]:
    credentials._cache.clear()
    yield
    credentials._cache.clear()


@pytest.fixture(scope="module")
def key_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("keys")
    for role in Role:
        create_key_pair(directory, role.value)
    create_key_pair(directory, "worker-batch1")
    return directory


@pytest.fixture(scope="module")
def trusted(key_dir: Path) -> TrustedKeys:
    return TrustedKeys(key_dir)


def key(key_dir: Path, name: str) -> SigningKey:
    return SigningKey.load(private_key_path(key_dir, name))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _forged(header: dict[str, Any], claims: dict[str, Any], signature: bytes = b"") -> str:
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    return f"{signing_input}.{_b64(signature)}"


def _claims(**overrides: Any) -> dict[str, Any]:
    now = int(time.time())
    claims: dict[str, Any] = {"iat": now, "exp": now + 60, "iss": "durable-ops"}
    claims.update(overrides)
    return {k: v for k, v in claims.items() if v is not None}


def _signed(signer: SigningKey, **overrides: Any) -> str:
    return jwt.encode(
        _claims(**overrides), signer.private_key, algorithm="EdDSA", headers={"kid": signer.kid}
    )


@pytest.mark.parametrize("role", list(Role))
def test_a_minted_token_verifies_as_the_role_of_its_key(
    role: Role, key_dir: Path, trusted: TrustedKeys
) -> None:
    assert verify_service_token(trusted, mint_service_token(key(key_dir, role.value))).role is role


def test_an_issued_workers_key_is_a_worker(key_dir: Path, trusted: TrustedKeys) -> None:
    signer = key(key_dir, "worker-batch1")
    token = mint_service_token(signer)
    verified = verify_service_token(trusted, token)
    assert (verified.role, verified.name) == (Role.WORKER, "worker-batch1")
    assert jwt.decode(token, options={"verify_signature": False})["sub"] == "worker-batch1"


def test_minted_claims_carry_issuer_expiry_and_the_keys_id(key_dir: Path) -> None:
    signer = key(key_dir, "worker")
    token = mint_service_token(signer, ttl_seconds=120, subject="sdk-1")
    claims = jwt.decode(token, signer.private_key.public_key(), algorithms=["EdDSA"])
    assert claims["iss"] == "durable-ops"
    assert claims["sub"] == "sdk-1"
    assert claims["exp"] - claims["iat"] == 120
    assert "role" not in claims  # the key says the role
    assert jwt.get_unverified_header(token) == {"alg": "EdDSA", "kid": signer.kid, "typ": "JWT"}


def test_the_gateways_key_claiming_operator_is_refused(key_dir: Path, trusted: TrustedKeys) -> None:
    with pytest.raises(Unauthenticated):
        verify_service_token(trusted, _signed(key(key_dir, "gateway"), role="operator"))
    # Naming its own role is allowed: the claim only has to agree with the key.
    signed = _signed(key(key_dir, "worker"), role="worker")
    assert verify_service_token(trusted, signed).role is Role.WORKER


def test_a_workers_key_under_the_gateways_kid_is_refused(
    key_dir: Path, trusted: TrustedKeys
) -> None:
    worker = key(key_dir, "worker")
    token = jwt.encode(
        _claims(),
        worker.private_key,
        algorithm="EdDSA",
        headers={"kid": key(key_dir, "gateway").kid},
    )
    with pytest.raises(Unauthenticated):
        verify_service_token(trusted, token)


def test_a_key_the_services_do_not_hold_is_refused(tmp_path: Path, trusted: TrustedKeys) -> None:
    stranger = mint_service_token(SigningKey.load(create_key_pair(tmp_path, "operator")))
    with pytest.raises(Unauthenticated):
        verify_service_token(trusted, stranger)


def test_a_new_key_is_trusted_after_a_second_and_a_deleted_one_no_longer(tmp_path: Path) -> None:
    now = [0.0]
    trusted = TrustedKeys(tmp_path, clock=lambda: now[0])
    token = mint_service_token(SigningKey.load(create_key_pair(tmp_path, "worker-late")))
    with pytest.raises(Unauthenticated):
        verify_service_token(trusted, token)
    now[0] += RESCAN_SECONDS
    assert verify_service_token(trusted, token).role is Role.WORKER
    credentials._cache.clear()
    (tmp_path / "public" / "worker-late.pub").unlink()
    now[0] += RESCAN_SECONDS
    with pytest.raises(Unauthenticated):
        verify_service_token(trusted, token)


def test_a_key_file_it_cannot_use_is_warned_about_once_and_again_once_it_changes(
    tmp_path: Path,
) -> None:
    """The folder is read again each second: one warning per content of the file, naming it
    and why, never quoting it."""
    create_key_pair(tmp_path, "gateway")
    corrupt = tmp_path / "public" / "worker-late.pub"
    corrupt.write_text("-----BEGIN PUBLIC KEY-----\nnot base64\n-----END PUBLIC KEY-----\n")
    now = [0.0]
    with capture_logs() as logs:
        trusted = TrustedKeys(tmp_path, clock=lambda: now[0])
        for _ in range(3):
            now[0] += RESCAN_SECONDS
            trusted.find("kid")
        private = private_key_path(tmp_path, "gateway").read_text()  # a mistaken copy
        corrupt.write_text(private)
        for _ in range(3):
            now[0] += RESCAN_SECONDS
            trusted.find("kid")
    skipped = [event for event in logs if event["event"] == "service_key_skipped"]
    assert [(event["path"], event["reason"]) for event in skipped] == [
        (str(corrupt), "not a PEM public key"),
        (str(corrupt), "a private key, not a public one"),
    ]
    assert all(event["log_level"] == "warning" for event in skipped)
    body = "".join(private.splitlines()[1:-1])
    assert body not in repr(logs)


def test_a_public_key_of_another_algorithm_is_skipped_and_the_others_still_trusted(
    tmp_path: Path,
) -> None:
    """A stray non-Ed25519 key (an EC one, say) is warned about and skipped: it must not
    make the reading of the folder fail, which would refuse every credential."""
    gateway = SigningKey.load(create_key_pair(tmp_path, "gateway"))
    stray = tmp_path / "public" / "worker-ec.pub"
    stray.write_bytes(
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    now = [0.0]
    with capture_logs() as logs:
        trusted = TrustedKeys(tmp_path, clock=lambda: now[0])
        now[0] += RESCAN_SECONDS
        assert verify_service_token(trusted, mint_service_token(gateway)).role is Role.GATEWAY
    skipped = [event for event in logs if event["event"] == "service_key_skipped"]
    assert [event["path"] for event in skipped] == [str(stray)]
    assert skipped[0]["reason"].endswith(" key, not Ed25519")  # "EC key", as cryptography names it


def test_a_service_whose_key_files_are_all_unusable_says_which_and_why(tmp_path: Path) -> None:
    public = tmp_path / "public"
    public.mkdir()
    (public / "gateway.pub").write_text("not a key")
    with pytest.raises(SettingsError) as refused:
        trusted_keys(Settings(service_keys_dir=str(tmp_path)))
    assert str(refused.value) == (
        f"no usable public service keys in {public} (OPS_SERVICE_KEYS_DIR), so every call"
        " would be refused; skipped: gateway.pub (not a PEM public key)"
    )


def test_a_previous_key_is_trusted_during_a_rotation(tmp_path: Path) -> None:
    old = SigningKey.load(create_key_pair(tmp_path, "gateway"))
    public = tmp_path / "public"
    (public / "gateway.pub").rename(public / "gateway.previous.pub")
    private_key_path(tmp_path, "gateway").unlink()
    new = SigningKey.load(create_key_pair(tmp_path, "gateway"))
    assert old.kid != new.kid
    trusted = TrustedKeys(tmp_path)
    for signer in (old, new):  # one name: the holder is the same
        verified = verify_service_token(trusted, mint_service_token(signer))
        assert (verified.role, verified.name) == (Role.GATEWAY, "gateway")


def test_alg_none_is_refused(key_dir: Path, trusted: TrustedKeys) -> None:
    header = {"alg": "none", "typ": "JWT", "kid": key(key_dir, "gateway").kid}
    with pytest.raises(Unauthenticated):
        verify_service_token(trusted, _forged(header, _claims()))


def test_hs256_keyed_with_the_public_key_is_refused(key_dir: Path, trusted: TrustedKeys) -> None:
    # The classic algorithm-confusion forgery: the public key used as an HMAC secret.
    gateway = key(key_dir, "gateway")
    public_pem = (key_dir / "public" / "gateway.pub").read_bytes()
    header = {"alg": "HS256", "typ": "JWT", "kid": gateway.kid}
    unsigned = _forged(header, _claims()).rsplit(".", 1)[0]
    signature = hmac.new(public_pem, unsigned.encode(), hashlib.sha256).digest()
    with pytest.raises(Unauthenticated):
        verify_service_token(trusted, f"{unsigned}.{_b64(signature)}")


@pytest.mark.parametrize(
    "claims",
    [
        pytest.param({"exp": None}, id="no-exp"),
        pytest.param({"exp": int(time.time()) - 3600}, id="expired"),
        pytest.param({"role": "admin"}, id="unknown-role"),
        pytest.param({"iss": "someone-else"}, id="wrong-issuer"),
        pytest.param({"iss": None}, id="no-issuer"),
    ],
)
def test_incomplete_or_foreign_claims_are_refused(
    claims: dict[str, Any], key_dir: Path, trusted: TrustedKeys
) -> None:
    with pytest.raises(Unauthenticated):
        verify_service_token(trusted, _signed(key(key_dir, "gateway"), **claims))


@pytest.mark.parametrize("token", ["not.a.jwt", "", "a.b", "e30.e30.e30"])
def test_garbage_is_refused(token: str, trusted: TrustedKeys) -> None:
    with pytest.raises(Unauthenticated):
        verify_service_token(trusted, token)


DAY = 24 * 3600


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
def test_a_credential_past_the_maximum_lifetime_is_refused(
    issued_ago: int, lifetime: int, key_dir: Path, trusted: TrustedKeys
) -> None:
    """24 h by default: whatever ``exp`` says, an old or long-lived credential is refused."""
    iat = int(time.time()) - issued_ago
    token = _signed(key(key_dir, "gateway"), iat=iat, exp=iat + lifetime)
    with pytest.raises(Unauthenticated) as refused:
        verify_service_token(trusted, token)
    assert refused.value.code == "invalid_service_credential"


def test_a_credential_within_the_maximum_lifetime_is_accepted(
    key_dir: Path, trusted: TrustedKeys
) -> None:
    iat = int(time.time()) - DAY + 60
    gateway = key(key_dir, "gateway")
    signed = _signed(gateway, iat=iat, exp=iat + DAY)
    assert verify_service_token(trusted, signed).role is Role.GATEWAY
    worker = mint_service_token(key(key_dir, "worker"), DAY)
    assert verify_service_token(trusted, worker).role is Role.WORKER


def test_the_maximum_lifetime_is_a_setting(
    monkeypatch: pytest.MonkeyPatch, key_dir: Path, trusted: TrustedKeys
) -> None:
    worker, gateway = key(key_dir, "worker"), key(key_dir, "gateway")
    monkeypatch.setenv("OPS_SERVICE_CREDENTIAL_MAX_AGE_SECONDS", "600")
    credentials.configured_max_age_seconds.cache_clear()
    try:
        assert credentials.configured_max_age_seconds() == 600
        with pytest.raises(Unauthenticated):
            verify_service_token(trusted, mint_service_token(worker, 601))
        iat = int(time.time()) - 700
        with pytest.raises(Unauthenticated):
            verify_service_token(trusted, _signed(gateway, iat=iat, exp=iat + 600))
        assert verify_service_token(trusted, mint_service_token(worker, 600))
    finally:
        credentials.configured_max_age_seconds.cache_clear()
    # An explicit bound wins over the setting.
    assert verify_service_token(trusted, _signed(gateway), max_age_seconds=60).role is Role.GATEWAY
    late = _signed(gateway, exp=int(time.time()) + 120)
    with pytest.raises(Unauthenticated):
        verify_service_token(trusted, late, max_age_seconds=60)


def _count_decodes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real_decode = jwt.decode

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real_decode(*args, **kwargs)

    monkeypatch.setattr(jwt, "decode", counting)
    return calls


def test_verification_is_cached_until_the_token_expires(
    monkeypatch: pytest.MonkeyPatch, key_dir: Path, trusted: TrustedKeys
) -> None:
    calls = _count_decodes(monkeypatch)
    now = [time.time()]
    cache = credentials._VerifiedTokens(clock=lambda: now[0], max_age=3600)
    monkeypatch.setattr(credentials, "_cache", cache)
    token = mint_service_token(key(key_dir, "worker"), ttl_seconds=30)

    verify_service_token(trusted, token)
    verify_service_token(trusted, token)
    assert len(calls) == 1

    now[0] += 31  # past exp: the cache must not vouch for it any more
    verify_service_token(trusted, token)
    assert len(calls) == 2


def test_a_deleted_keys_credential_stops_working_a_minute_after_its_verification(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A verdict is cached for at most a minute however long its token lives: a key deleted
    from the folder stops vouching for the credentials it signed within that minute, not
    at their ``exp`` (up to the 24 h bound), and at the minute's very instant."""
    now = [time.time()]
    cache = credentials._VerifiedTokens(clock=lambda: now[0], max_age=60)
    monkeypatch.setattr(credentials, "_cache", cache)
    signer = SigningKey.load(create_key_pair(tmp_path, "worker-gone"))
    trusted = TrustedKeys(tmp_path, clock=lambda: now[0])
    token = mint_service_token(signer, ttl_seconds=3600)
    assert verify_service_token(trusted, token).name == "worker-gone"

    (tmp_path / "public" / "worker-gone.pub").unlink()
    now[0] += 59  # the folder is read again, but the verdict still stands
    assert verify_service_token(trusted, token).name == "worker-gone"
    now[0] += 1
    with pytest.raises(Unauthenticated):
        verify_service_token(trusted, token)


def test_the_cache_is_bounded_and_evicts_the_least_recently_used(
    key_dir: Path, trusted: TrustedKeys
) -> None:
    gateway, worker, producer = (
        verify_service_token(trusted, mint_service_token(key(key_dir, name)))
        for name in ("gateway", "worker", "producer")
    )
    cache = credentials._VerifiedTokens(capacity=2)
    far = time.time() + 600
    cache.put("a", gateway, far)
    cache.put("b", worker, far)
    assert cache.get("a") is gateway  # "a" is now the most recent
    cache.put("c", producer, far)
    assert cache.get("b") is None
    assert cache.get("a") is gateway
    assert cache.get("c") is producer


def test_a_readable_private_key_is_refused(tmp_path: Path) -> None:
    path = create_key_pair(tmp_path, "gateway")
    path.chmod(0o644)
    with pytest.raises(SettingsError, match="chmod 600"):
        SigningKey.load(path)


@pytest.mark.parametrize("name", ["admin", "gateway.extra", "Worker", "worker-", "worker-A b"])
def test_a_key_file_must_name_a_role(name: str, tmp_path: Path) -> None:
    path = tmp_path / f"{name}.key"
    path.write_text("x")
    path.chmod(0o600)
    with pytest.raises(SettingsError, match="not a service key"):
        SigningKey.load(path)


def test_create_key_pair_keeps_an_existing_key(tmp_path: Path) -> None:
    first = SigningKey.load(create_key_pair(tmp_path, "worker")).kid
    assert SigningKey.load(create_key_pair(tmp_path, "worker")).kid == first
    assert stat.S_IMODE(private_key_path(tmp_path, "worker").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "public" / "worker.pub").stat().st_mode) == 0o600


def _bearer(key_dir: Path, role: Role) -> tuple[str, str]:
    return ("authorization", f"Bearer {mint_service_token(key(key_dir, role.value))}")


def test_key_from_metadata_reads_one_bearer_credential(key_dir: Path, trusted: TrustedKeys) -> None:
    metadata = [_bearer(key_dir, Role.PRODUCER), ("x-owner-id", "u1")]
    assert key_from_metadata(metadata, trusted).role is Role.PRODUCER


@pytest.mark.parametrize("shape", ["missing", "empty-token", "not-bearer", "two-credentials"])
def test_key_from_metadata_refuses_missing_or_ambiguous_credentials(
    shape: str, key_dir: Path, trusted: TrustedKeys
) -> None:
    gateway = _bearer(key_dir, Role.GATEWAY)
    metadata = {
        "missing": [],
        "empty-token": [("authorization", "Bearer ")],
        "not-bearer": [("authorization", "Basic " + gateway[1].removeprefix("Bearer "))],
        "two-credentials": [gateway, _bearer(key_dir, Role.WORKER)],
    }[shape]
    with pytest.raises(Unauthenticated):
        key_from_metadata(metadata, trusted)


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


def test_service_caller_metadata_carries_a_valid_credential_and_the_owner(
    key_dir: Path, trusted: TrustedKeys
) -> None:
    caller = ServiceCaller(key(key_dir, "gateway"))
    assert caller.role is Role.GATEWAY
    assert len(caller.metadata()) == 1
    metadata = caller.metadata("alice")
    assert dict(metadata)["x-owner-id"] == "alice"
    assert key_from_metadata(metadata, trusted).role is Role.GATEWAY


def test_service_caller_renews_its_token_before_expiry(
    monkeypatch: pytest.MonkeyPatch, key_dir: Path
) -> None:
    minted: list[int] = []

    def mint(signer: SigningKey, ttl_seconds: int) -> str:
        minted.append(ttl_seconds)
        return f"token-{len(minted)}"

    monkeypatch.setattr(client, "mint_service_token", mint)
    now = [1000.0]
    caller = ServiceCaller(key(key_dir, "worker"), ttl_seconds=300, clock=lambda: now[0])

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
