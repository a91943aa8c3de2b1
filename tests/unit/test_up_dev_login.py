"""``opsctl up`` turns dev-login on for its gateway only while that listens on loopback alone."""

from __future__ import annotations

import pytest

from durable_ops.settings import Settings
from durable_ops.up import _dev_login_refusal, _stack_env


@pytest.mark.parametrize(
    "bind", ["127.0.0.1:8080", "127.0.0.9:8080", "[::1]:8080", "localhost:8080"]
)
def test_a_loopback_gateway_gets_dev_login(bind: str) -> None:
    settings = Settings(gateway_bind=bind)
    assert _dev_login_refusal(settings) is None
    assert _stack_env(settings)["OPS_DEV_LOGIN"] == "1"


@pytest.mark.parametrize("bind", ["0.0.0.0:8080", "[::]:8080", "192.0.2.10:8080", "box.lan:8080"])
def test_a_reachable_gateway_gets_none_and_the_reason_names_the_bind(bind: str) -> None:
    settings = Settings(gateway_bind=bind)
    assert _stack_env(settings)["OPS_DEV_LOGIN"] == "0"
    reason = _dev_login_refusal(settings)
    assert reason is not None
    assert bind in reason
    assert "OPS_GATEWAY_BIND" in reason
    assert "loopback" in reason
