"""``opsctl up`` checks its keys by path (a warm start imports no crypto nor grpc): the
paths it checks are the ones ``rpc.keys`` and ``rpc.tls`` make."""

from __future__ import annotations

from pathlib import Path

from durable_ops.model.scope import Role
from durable_ops.rpc.keys import ensure_role_keys, private_key_path
from durable_ops.rpc.tls import CA_CERT, SERVER_CERT, SERVER_KEY, ensure_tls
from durable_ops.stack.children import SIGNS_AS, own_key_env
from durable_ops.up import KEPT_KEYS, _keys_made


def test_the_kept_paths_are_what_the_key_makers_make(tmp_path: Path) -> None:
    assert not _keys_made(tmp_path)
    ensure_role_keys(tmp_path)
    assert not _keys_made(tmp_path)  # the certificate is missing yet
    ensure_tls(tmp_path)
    assert _keys_made(tmp_path)
    made = {private_key_path(tmp_path, role.value) for role in Role}
    made |= {tmp_path / CA_CERT, tmp_path / SERVER_CERT, tmp_path / SERVER_KEY}
    assert {tmp_path / kept for kept in KEPT_KEYS} == made


def test_one_missing_key_is_made_again(tmp_path: Path) -> None:
    ensure_role_keys(tmp_path)
    ensure_tls(tmp_path)
    private_key_path(tmp_path, "operator").unlink()
    assert not _keys_made(tmp_path)


def test_each_signing_child_is_handed_the_key_rpc_keys_makes(tmp_path: Path) -> None:
    """``stack.children`` spells the private key's path itself (importing rpc would load
    grpc before the children start): it must be the path ``rpc.keys`` writes."""
    env = {"OPS_SERVICE_KEYS_DIR": str(tmp_path)}
    for name, role in SIGNS_AS.items():
        assert own_key_env(name, env) == {
            "OPS_SERVICE_KEY": str(private_key_path(tmp_path, role.value))
        }
    assert own_key_env("services", env) == {}  # the services sign nothing
