"""User tokens live at most 30 days (issue 35, point 5): not minted longer, not accepted longer.

On both engines: the gateway answers from the services over their database.
"""

from __future__ import annotations

import time
from pathlib import Path

import jwt
import pytest

from durable_ops import cli
from durable_ops.gateway.auth import MAX_USER_TOKEN_SECONDS, mint_user_token
from durable_ops.model.errors import InvalidArgument
from tests.support.gateway import JWT_SECRET, gateway_client, make_app, run
from tests.support.grpc_services import Services

DAY = 24 * 3600
PATH = "/api/notifications/unread-count"


def _signed(**claims: int) -> str:
    """A token signed with the gateway's own secret, with the times given (no mint limits)."""
    return jwt.encode({"sub": "alice", **claims}, JWT_SECRET, algorithm="HS256")


def test_a_token_living_longer_than_30_days_is_refused_with_401(services: Services) -> None:
    now = int(time.time())
    cases = {
        "one day, minted": (mint_user_token(JWT_SECRET, "alice", DAY), 200),
        "30 days exactly": (_signed(iat=now, exp=now + 30 * DAY), 200),
        "31 days": (_signed(iat=now, exp=now + 31 * DAY), 401),
        "ten years, minted years ago": (_signed(iat=now - 3000 * DAY, exp=now + 650 * DAY), 401),
        "no iat, so no lifetime": (_signed(exp=now + DAY), 401),
        "no exp": (_signed(iat=now), 401),
        "iat in the future": (_signed(iat=now + 60 * DAY, exp=now + 61 * DAY), 401),
    }

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            for name, (value, status) in cases.items():
                bearer = await client.get(PATH, headers={"Authorization": f"Bearer {value}"})
                assert bearer.status_code == status, name
                login = await client.post("/auth/login", json={"token": value})
                assert login.status_code == status, f"login {name}"
                client.cookies.clear()

    run(scenario())


def test_no_token_longer_than_30_days_is_minted() -> None:
    longest = mint_user_token(JWT_SECRET, "alice", MAX_USER_TOKEN_SECONDS)
    claims = jwt.decode(longest, JWT_SECRET, algorithms=["HS256"])
    assert claims["exp"] - claims["iat"] == 30 * DAY
    with pytest.raises(InvalidArgument, match="30 days"):
        mint_user_token(JWT_SECRET, "alice", MAX_USER_TOKEN_SECONDS + 1)


@pytest.mark.parametrize("ttl", ["2678400", "315360000", "0"])
def test_opsctl_token_refuses_a_ttl_beyond_30_days_with_exit_2(
    ttl: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPS_JWT_SECRET", raising=False)
    assert cli.main(["token", "--user", "alice", "--ttl", ttl]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        "opsctl token: --ttl must be between 1 and 2592000 seconds (30 days);"
        " mint a new token when one runs out"
    ]
    assert not (tmp_path / "var").exists()  # refused before any secret is made
    assert cli.main(["token", "--user", "alice", "--ttl", "2592000"]) == 0
