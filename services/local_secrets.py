"""The secret an embedded stack keeps between runs: ``var/secrets.json``, mode 0600.

When ``OPS_JWT_SECRET`` is not set, ``opsctl up``, ``opsctl serve gateway``
and ``opsctl token`` use the secret kept here, made once from 256 random
bits the first time any of them needs it (service keys are kept apart, one
per role: ``rpc.keys``). So a token from
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
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from durable_ops.private_files import read_private_text, write_private_file
from durable_ops.settings import Settings, SettingsError, variable

SECRETS_PATH = Path("var") / "secrets.json"
KEPT = ("jwt_secret",)  # a file of an earlier release also holds a service secret: unused


def load_or_create(path: Path = SECRETS_PATH) -> dict[str, str]:
    """The kept secrets, made first if there are none (safe against a concurrent maker)."""
    if not path.exists():
        _create(path)
    return _read(path)


def with_kept_secrets(
    settings: Settings,
    *,
    environ: Mapping[str, str] | None = None,
    path: Path = SECRETS_PATH,
) -> Settings:
    """``settings`` with the kept user-token secret when the environment sets none; a
    secret others can know or guess is refused (``Settings.check_user_token_secrets``)."""
    env = os.environ if environ is None else environ
    if variable("jwt_secret") not in env:
        try:
            kept = load_or_create(path)
        except OSError as error:
            raise SettingsError(
                f"cannot keep a generated secret in {path} ({error.strerror}): set OPS_JWT_SECRET"
            ) from error
        settings = replace(settings, jwt_secret=kept["jwt_secret"])
    settings.check_user_token_secrets()
    return settings


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
