"""The secrets an embedded stack keeps between runs: ``var/secrets.json``, mode 0600.

When ``OPS_JWT_SECRET`` or ``OPS_SERVICE_SECRET`` is not set, ``opsctl up``,
``opsctl serve …`` and ``opsctl token`` use the secret kept here, made once
from 256 random bits the first time any of them needs it. So a token from
``opsctl token`` works with the stack ``opsctl up`` runs, and a restart keeps
everyone signed in. The built-in defaults are public and never used then.
Rotate by deleting the file (everyone signs in again) or, without signing
anyone out, by setting ``OPS_JWT_SECRET`` and listing the old one in
``OPS_JWT_PREVIOUS_SECRETS``. A file that group or others may read is refused
(``private_files``).
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from durable_ops.private_files import read_private_text, write_private_file
from durable_ops.settings import Settings, SettingsError, variable

SECRETS_PATH = Path("var") / "secrets.json"
KEPT = ("jwt_secret", "service_secret")


def load_or_create(path: Path = SECRETS_PATH) -> dict[str, str]:
    """The kept secrets, made first if there are none (safe against a concurrent maker)."""
    if not path.exists():
        _create(path)
    return _read(path)


def with_kept_secrets(
    settings: Settings,
    needed: Sequence[str] = KEPT,
    *,
    environ: Mapping[str, str] | None = None,
    path: Path = SECRETS_PATH,
) -> Settings:
    """``settings`` with the kept secret for each ``needed`` one the environment does not set."""
    env = os.environ if environ is None else environ
    missing = [name for name in needed if variable(name) not in env]
    if not missing:
        return settings
    try:
        kept = load_or_create(path)
    except OSError as error:
        raise SettingsError(
            f"cannot keep generated secrets in {path} ({error.strerror}): set "
            + " and ".join(variable(name) for name in missing)
        ) from error
    return replace(
        settings,
        jwt_secret=kept["jwt_secret"] if "jwt_secret" in missing else settings.jwt_secret,
        service_secret=(
            kept["service_secret"] if "service_secret" in missing else settings.service_secret
        ),
    )


def _create(path: Path) -> None:
    fresh = {name: secrets.token_urlsafe(32) for name in KEPT}
    write_private_file(path, json.dumps(fresh).encode())


def _read(path: Path) -> dict[str, str]:
    text = read_private_text(path)  # outside the try: its refusal is a ValueError too
    try:
        kept = json.loads(text)
    except ValueError:
        kept = None
    if not isinstance(kept, dict) or not all(
        isinstance(kept.get(name), str) and kept[name] for name in KEPT
    ):
        raise SettingsError(f"{path} is not a secrets file of durable-ops; move it away")
    return {name: kept[name] for name in KEPT}
