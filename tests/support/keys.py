"""The service keys of a test run: one key pair per role, made once per test process in a
private temporary folder, and the environment that hands a child process its own key."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from functools import cache
from pathlib import Path

from durable_ops.model.scope import Role
from durable_ops.rpc.credentials import mint_service_token
from durable_ops.rpc.keys import SigningKey, TrustedKeys, ensure_role_keys, private_key_path


@cache
def keys_dir() -> Path:
    directory = Path(tempfile.mkdtemp(prefix="durable-ops-test-keys-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    ensure_role_keys(directory)
    return directory


@cache
def signing_key(role: Role) -> SigningKey:
    return SigningKey.load(private_key_path(keys_dir(), role.value))


@cache
def trusted() -> TrustedKeys:
    return TrustedKeys(keys_dir())


def credential(role: Role, *, subject: str = "") -> str:
    return mint_service_token(signing_key(role), subject=subject)


def key_env(role: Role | None = None) -> dict[str, str]:
    """What a child process needs: the keys folder, and ``role``'s private key if it signs."""
    env = {"OPS_SERVICE_KEYS_DIR": str(keys_dir())}
    if role is not None:
        env["OPS_SERVICE_KEY"] = str(private_key_path(keys_dir(), role.value))
    return env
