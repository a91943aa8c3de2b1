"""A three-node MariaDB Galera cluster on loopback (``scripts/galera.sh``), and the product on it.

The cluster is the test's own: its datadirs under tmp_path, its own ports.
One operation's life crosses the nodes (created through node 1, claimed
through node 2, completed through node 3); a node SIGKILLed and brought back
rejoins from its recovered position with nothing lost. Without root or
``galera-4`` the tests skip, unless ``OPS_REQUIRE_GALERA=1`` makes that a
failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest
from sqlalchemy.engine import make_url

from durable_ops.clock import utc_now
from durable_ops.storage import migrate
from tests.support.grpc_services import running_services
from tests.support.operations_client import ALICE, SUCCEEDED, OpsClient

pytestmark = [pytest.mark.galera, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "galera.sh"
PROVIDER = Path("/usr/lib/galera/libgalera_smm.so")
# Away from the defaults (3311…, 4567…, 4444…), so a developer's own cluster is left alone.
PORTS = {"GALERA_PORT_BASE": "23311", "GALERA_GROUP_PORT_BASE": "24567"}
SST_PORTS = {"GALERA_SST_PORT_BASE": "24444"}


def _unavailable() -> str | None:
    if os.geteuid() != 0:
        return "the Galera nodes run as the mysql user: needs root"
    if not PROVIDER.exists() or shutil.which("mariadbd") is None:
        return "galera-4 and mariadb-server are not installed"
    return None


def _galera(*args: str, cluster: Path) -> list[str]:
    done = subprocess.run(
        [str(SCRIPT), *args, str(cluster)],
        env={**os.environ, **PORTS, **SST_PORTS},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.split()


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Path, list[str]]]:
    reason = _unavailable()
    if reason is not None:
        if os.environ.get("OPS_REQUIRE_GALERA") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    # Not under pytest's tmp_path: its parent is private to root, and the nodes run as mysql.
    where = Path(tempfile.mkdtemp(prefix="durable-ops-galera-"))
    where.chmod(0o755)
    urls = _galera("start", "3", cluster=where)
    try:
        yield where, urls
    finally:
        _galera("stop", "3", cluster=where)
        shutil.rmtree(where, ignore_errors=True)


def _database(server_url: str, name: str) -> str:
    parsed = make_url(server_url)
    with (
        pymysql.connect(
            host=parsed.host, port=parsed.port or 3306, user="root", autocommit=True
        ) as conn,
        conn.cursor() as cursor,
    ):
        cursor.execute(
            f"CREATE DATABASE IF NOT EXISTS {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
        )
    return parsed.set(database=name).render_as_string(hide_password=False)


def _scalar(url: str, query: str) -> object:
    parsed = make_url(url)
    with (
        pymysql.connect(
            host=parsed.host, port=parsed.port or 3306, user="root", database=parsed.database
        ) as conn,
        conn.cursor() as cursor,
    ):
        cursor.execute("SET SESSION wsrep_sync_wait = 1")  # read what the cluster committed
        cursor.execute(query)
        row = cursor.fetchone()
        return row[0] if row else None


def test_the_cluster_has_three_synced_nodes(cluster: tuple[Path, list[str]]) -> None:
    where, urls = cluster
    assert len(urls) == 3
    status = _galera("status", "3", cluster=where)
    assert status.count("Synced") == 3, status
    size = _scalar(
        urls[0].rstrip("/") + "/mysql",
        "SELECT variable_value FROM information_schema.global_status"
        " WHERE variable_name = 'WSREP_CLUSTER_SIZE'",
    )
    assert size == "3"


def test_migrations_give_every_table_a_primary_key(cluster: tuple[Path, list[str]]) -> None:
    _, urls = cluster
    url = _database(urls[0], "ops_keys")
    migrate.upgrade(url)  # DDL under total order isolation, replicated to every node
    on_node_3 = make_url(urls[2]).set(database="ops_keys").render_as_string(hide_password=False)
    without_key = _scalar(
        on_node_3,
        "SELECT COUNT(*) FROM information_schema.tables t WHERE t.table_schema = 'ops_keys'"
        " AND t.table_type = 'BASE TABLE' AND NOT EXISTS (SELECT 1 FROM"
        " information_schema.table_constraints c WHERE c.table_schema = t.table_schema"
        " AND c.table_name = t.table_name AND c.constraint_type = 'PRIMARY KEY')",
    )
    assert without_key == 0  # Galera replicates row events by primary key
    engines = _scalar(
        on_node_3,
        "SELECT GROUP_CONCAT(DISTINCT engine) FROM information_schema.tables"
        " WHERE table_schema = 'ops_keys' AND table_type = 'BASE TABLE'",
    )
    assert engines == "InnoDB"


def test_one_operation_crosses_the_nodes_and_survives_a_node_crash(
    cluster: tuple[Path, list[str]],
) -> None:
    where, urls = cluster
    url = _database(urls[0], "ops_life")
    migrate.upgrade(url)
    on = [make_url(u).set(database="ops_life").render_as_string(hide_password=False) for u in urls]
    with (
        running_services(on[0], utc_now) as first,
        running_services(on[1], utc_now) as second,
        running_services(on[2], utc_now) as third,
    ):
        created = OpsClient(first).create(ALICE, "across-nodes")
        lease = OpsClient(second).claim_one()
        assert lease.id == created.id
        OpsClient(third).complete(lease)
        assert OpsClient(first).get(ALICE, created.id).state == SUCCEEDED

        _galera("kill", "2", cluster=where)
        later = OpsClient(first).create(ALICE, "while-node-2-is-down")
        _galera("start", "3", cluster=where)  # node 2 recovers its position and rejoins
    count = _scalar(on[1], "SELECT COUNT(*) FROM user_operations")
    assert count == 2  # node 2 has both, including the one written while it was down
    notifications = _scalar(on[1], "SELECT COUNT(*) FROM user_notifications")
    assert notifications == 1  # the one success
    assert later.id
