"""Service credentials the services must refuse, made as a forger would make them: with a
key of their own that no keys folder holds, or with a trusted key but claims of their
choosing (``tests.support.keys`` makes the honest ones)."""

from __future__ import annotations

import time
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from durable_ops.model.scope import Role
from durable_ops.rpc.credentials import ALGORITHM, ISSUER
from durable_ops.rpc.keys import SigningKey, thumbprint


def untrusted_key(role: Role) -> SigningKey:
    """A fresh key named for ``role`` that no service trusts."""
    private_key = Ed25519PrivateKey.generate()
    return SigningKey(role.value, role, thumbprint(private_key.public_key()), private_key)


def claims(**overrides: Any) -> dict[str, Any]:
    """A credential's claims as ``mint_service_token`` makes them, with ``overrides``."""
    now = int(time.time())
    return {"sub": "forger", "iat": now, "exp": now + 300, "iss": ISSUER, **overrides}


def signed(key: SigningKey, body: dict[str, Any], *, kid: str | None = None) -> str:
    """``body`` signed with ``key`` (EdDSA), its header naming ``kid`` (default the key's)."""
    return jwt.encode(body, key.private_key, algorithm=ALGORITHM, headers={"kid": kid or key.kid})
