"""Where ``opsctl console link`` says the gateway is: ``--url``, else the running ``opsctl
up``'s, else ``OPS_GATEWAY_BIND``'s (it printed 127.0.0.1:8080 whatever the bind said)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from durable_ops.console_cli import gateway_url
from durable_ops.settings import Settings
from durable_ops.stack import address_file


@pytest.mark.parametrize(
    ("bind", "url"),
    [
        ("127.0.0.1:8080", "http://127.0.0.1:8080/"),  # the default bind
        ("127.0.0.1:23080", "http://127.0.0.1:23080/"),
        ("0.0.0.0:23080", "http://127.0.0.1:23080/"),  # a wildcard is reached on loopback
        ("[::]:23080", "http://[::1]:23080/"),
        ("[::1]:23080", "http://[::1]:23080/"),
        ("ops.internal:80", "http://ops.internal:80/"),
    ],
)
def test_without_url_or_stack_the_link_follows_the_gateway_bind(
    tmp_path: Path, bind: str, url: str
) -> None:
    assert gateway_url(None, bind, tmp_path / "stack.json") == url


def test_url_wins_then_the_running_stack_then_the_bind(tmp_path: Path) -> None:
    stack = tmp_path / "var" / "stack.json"
    address_file.write(Settings(), "http://127.0.0.1:9100/", pid=os.getpid(), path=stack)
    assert gateway_url("https://ops.example", "127.0.0.1:23080", stack) == "https://ops.example/"
    assert gateway_url("https://ops.example/ops/", "", stack) == "https://ops.example/ops/"
    assert gateway_url(None, "127.0.0.1:23080", stack) == "http://127.0.0.1:9100/"
    stack.unlink()
    assert gateway_url(None, "127.0.0.1:23080", stack) == "http://127.0.0.1:23080/"


def test_a_bad_url_or_bind_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="--url"):
        gateway_url("ftp://nowhere", "127.0.0.1:8080", tmp_path / "stack.json")
    with pytest.raises(argparse.ArgumentTypeError, match="--url 'http://'"):  # no host
        gateway_url("http://", "127.0.0.1:8080", tmp_path / "stack.json")
    with pytest.raises(ValueError, match="OPS_GATEWAY_BIND"):
        gateway_url(None, "nowhere", tmp_path / "stack.json")
