"""Generated secrets kept in var/: made once, private, used only where nothing is set."""

from __future__ import annotations

import json
import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from durable_ops.gateway.auth import InvalidToken, mint_user_token, verify_with_settings
from durable_ops.local_secrets import load_or_create, with_kept_secrets
from durable_ops.settings import DEFAULT_JWT_SECRET, Settings, SettingsError


def test_the_secrets_are_made_once_and_only_the_owner_can_read_them(tmp_path: Path) -> None:
    path = tmp_path / "var" / "secrets.json"
    first = load_or_create(path)
    assert load_or_create(path) == first
    assert len(first["jwt_secret"]) >= 43  # 256 bits, url-safe base64
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_processes_starting_together_agree_on_one_set(tmp_path: Path) -> None:
    path = tmp_path / "var" / "secrets.json"
    with ThreadPoolExecutor(8) as pool:
        made = list(pool.map(lambda _: load_or_create(path), range(16)))
    assert all(secrets == made[0] for secrets in made)
    assert sorted(p.name for p in path.parent.iterdir()) == ["secrets.json"]  # no drafts left


def test_only_an_unset_secret_comes_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "secrets.json"
    # Unset, as under `opsctl up`: the generated secret, never the published default.
    filled = with_kept_secrets(Settings(), environ={}, path=path)
    assert filled.jwt_secret == load_or_create(path)["jwt_secret"]
    chosen = Settings(jwt_secret="the-operator-chose-this-0123456789abcdef")
    untouched = with_kept_secrets(chosen, environ={"OPS_JWT_SECRET": "x"}, path=tmp_path / "no")
    assert untouched == chosen
    assert not (tmp_path / "no").exists()


def test_a_file_of_an_earlier_release_still_serves(tmp_path: Path) -> None:
    path = tmp_path / "secrets.json"
    kept = "kept-by-an-earlier-release-0123456789abcdef"
    path.write_text(json.dumps({"jwt_secret": kept, "service_secret": "unused"}))
    path.chmod(0o600)
    assert with_kept_secrets(Settings(), environ={}, path=path).jwt_secret == kept


@pytest.mark.parametrize(
    ("secret", "previous", "said"),
    [
        (DEFAULT_JWT_SECRET, "", "OPS_JWT_SECRET holds the published default"),
        ("abc", "", "OPS_JWT_SECRET holds a secret of 3 bytes; HS256 needs at least 32"),
        ("s" * 31, "", "OPS_JWT_SECRET holds a secret of 31 bytes"),
        ("s" * 32, "old", "OPS_JWT_PREVIOUS_SECRETS holds a secret of 3 bytes"),
        ("s" * 32, DEFAULT_JWT_SECRET, "OPS_JWT_PREVIOUS_SECRETS holds the published default"),
    ],
)
def test_a_secret_others_can_know_or_guess_is_refused(
    secret: str, previous: str, said: str, tmp_path: Path
) -> None:
    chosen = Settings(jwt_secret=secret, jwt_previous_secrets=previous)
    environ = {"OPS_JWT_SECRET": secret}
    with pytest.raises(SettingsError, match=said):
        with_kept_secrets(chosen, environ=environ, path=tmp_path / "no")
    assert not (tmp_path / "no").exists()
    long_enough = Settings(jwt_secret="s" * 32)  # RFC 7518 §3.2: 32 bytes is enough
    assert with_kept_secrets(long_enough, environ=environ, path=tmp_path / "no") == long_enough


def test_a_file_that_is_not_ours_or_a_place_that_cannot_hold_one_is_a_clear_error(
    tmp_path: Path,
) -> None:
    foreign = tmp_path / "secrets.json"
    foreign.write_text(json.dumps({"jwt_secret": ""}))
    foreign.chmod(0o600)  # private, so it is its content that is refused
    with pytest.raises(SettingsError, match="not a secrets file"):
        load_or_create(foreign)
    blocked = tmp_path / "file"
    blocked.write_text("")
    with pytest.raises(SettingsError, match="set OPS_JWT_SECRET"):
        with_kept_secrets(Settings(), environ={}, path=blocked / "secrets.json")


def test_secrets_never_show_in_the_settings_repr() -> None:
    settings = Settings(
        jwt_secret="jwt-s3cret",
        jwt_previous_secrets="old-s3cret",
        ai_external_api_key="key-s3cret",
    )
    assert "s3cret" not in repr(settings)


def test_a_token_signed_before_a_rotation_is_still_accepted() -> None:
    old = mint_user_token("old-secret-0123456789abcdef0123456789", "alice", 60)
    rotated = Settings(
        jwt_secret="new-secret-0123456789abcdef0123456789",
        jwt_previous_secrets=" old-secret-0123456789abcdef0123456789 , ",
    )
    assert verify_with_settings(rotated, old) == "alice"
    with pytest.raises(InvalidToken):
        verify_with_settings(Settings(jwt_secret=rotated.jwt_secret), old)


def test_a_secrets_file_others_may_read_is_refused_and_named(tmp_path: Path) -> None:
    path = tmp_path / "secrets.json"
    load_or_create(path)
    path.chmod(0o640)
    with pytest.raises(SettingsError, match=r"secrets.json has mode 0640.*chmod 600"):
        load_or_create(path)
