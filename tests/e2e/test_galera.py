"""A three-node MariaDB Galera cluster on loopback (``scripts/galera.sh``), and the product on it.

The cluster is the test's own: its datadirs under tmp_path, its own ports.
One operation's life crosses the nodes (created through node 1, claimed
through node 2, completed through node 3); a node SIGKILLed and brought back
rejoins from its recovered position with nothing lost. Without root or
``galera-4`` the tests skip, unless ``OPS_REQUIRE_GALERA=1`` makes that a
failure. ``OPS_TEST_GALERA_DIR`` points the tests at a developer's cluster
(its ports from ``GALERA_PORT_BASE`` and friends), which they leave running.

Then what Galera changes for the product (ADR 0017), each shown on the
cluster: a certification conflict at COMMIT is replayed; reads through one
node see what was just written through another; admission limits and token budgets
hold with admissions through two nodes; and how often claims through three nodes
conflict, with and without spreading them over the head of the queue
(a figure printed, not asserted).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pymysql
import pytest
from sqlalchemy import insert, text, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from durable_ops.ai_admission.admit import AdmitRequest, admit
from durable_ops.clock import utc_now
from durable_ops.gateway.auth import mint_user_token
from durable_ops.model import budgets, subjects
from durable_ops.model.admission import Limits
from durable_ops.model.concurrency_limits import Concurrency
from durable_ops.model.errors import CapacityExceeded, DomainError, NotFound, Unavailable
from durable_ops.model.lifecycle import Event
from durable_ops.settings import service_variable
from durable_ops.stack.children import Stack
from durable_ops.storage import budgets as budget_store
from durable_ops.storage import migrate, operations, workspace
from durable_ops.storage.db import GALERA_SYNC_WAIT, Database, on_galera
from durable_ops.storage.operations import claims
from durable_ops.storage.schema import UserOperation
from durable_ops.storage.tx import SCOPE_OWNER, Tx
from tests.support.ai_stack import LogTee
from tests.support.figures import report
from tests.support.grpc_services import running_services
from tests.support.keys import key_env
from tests.support.operations_client import ALICE, SUCCEEDED, OpsClient
from tests.support.ports import free_port
from tests.support.storage_conformance import CASES
from tests.support.workspace_client import entitle

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
    ports = {} if os.environ.get("OPS_TEST_GALERA_DIR") else {**PORTS, **SST_PORTS}
    done = subprocess.run(
        [str(SCRIPT), *args, str(cluster)],
        env={**os.environ, **ports},
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
    # A developer's running cluster (its DIR, ports from GALERA_*), started and left running.
    given = os.environ.get("OPS_TEST_GALERA_DIR")
    if given:
        yield Path(given), _galera("start", "3", cluster=Path(given))
        return
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


def _causal_connection(url: str) -> pymysql.Connection[Any]:
    """A raw session on one node that, like the product's, first waits for what the
    cluster committed: a write through another node just before is seen, read or updated."""
    parsed = make_url(url)
    return pymysql.connect(
        host=parsed.host, port=parsed.port or 3306, user="root", database=parsed.database,
        init_command=f"SET SESSION wsrep_sync_wait = {GALERA_SYNC_WAIT}",
    )  # fmt: skip


def _scalar(url: str, query: str) -> object:
    with _causal_connection(url) as conn, conn.cursor() as cursor:
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


def _create(tx: Tx, request: operations.CreateRequest) -> tuple[UserOperation, bool]:
    return operations.create(tx, request, utc_now())


def _on(urls: list[str], name: str) -> list[str]:
    return [make_url(u).set(database=name).render_as_string(hide_password=False) for u in urls]


def _migrated(urls: list[str], name: str) -> list[str]:
    _execute(urls[0].rstrip("/") + "/mysql", f"DROP DATABASE IF EXISTS {name}")  # a fresh one
    migrate.upgrade(_database(urls[0], name))
    return _on(urls, name)


def _databases(urls: list[str], pool_size: int = 4) -> list[Database]:
    return [Database(url, pool_size=pool_size) for url in urls]


def _dispose(databases: list[Database]) -> None:
    for db in databases:
        db.dispose()


def _causal(number: int) -> operations.CreateRequest:
    return operations.CreateRequest(
        task_type="test.causal", idempotency_key=f"k{number}", subject_type="job", subject_id="j"
    )


def test_sessions_on_galera_read_what_another_node_just_wrote(
    cluster: tuple[Path, list[str]],
) -> None:
    """wsrep_sync_wait is set on every session of a Galera node (detected from wsrep_on)."""
    _, urls = cluster
    on = _migrated(urls, "ops_causal")
    first, second = dbs = _databases(on[:2])
    try:
        with second.engine.connect() as connection:
            assert on_galera(connection)
            wait = connection.execute(text("SELECT @@SESSION.wsrep_sync_wait")).scalar()
        assert wait == GALERA_SYNC_WAIT
        missed = 0
        for number in range(100):
            row, _ = first.run(partial(_create, request=_causal(number)), owner_id=ALICE)
            try:  # at once, through the other node
                second.run(partial(operations.get, operation_id=row.id), owner_id=ALICE)
            except NotFound:
                missed += 1
        assert missed == 0
    finally:
        _dispose(dbs)


def test_a_transaction_that_begins_with_a_write_sees_what_another_node_just_wrote(
    cluster: tuple[Path, list[str]],
) -> None:
    """A completion (its first statement an UPDATE) through node 1 of a lease taken through node 2.

    Galera waits only at a transaction's first statement, and only for the kinds
    of statement ``wsrep_sync_wait`` names: with reads alone, the guarded UPDATE
    could run before node 1 applied the claim and answer that the lease is lost.
    """
    _, urls = cluster
    on = _migrated(urls, "ops_causal_write")
    first, second = dbs = _databases(on[:2])
    try:
        refused = 0
        for number in range(100):
            first.run(partial(_create, request=_causal(number)), owner_id=ALICE)
            (claim,) = second.run(
                lambda tx: operations.claim(tx, ["test.causal"], 60, utc_now()), owner_id=None
            )
            completion = operations.Settlement(
                ALICE, claim.operation.id, claim.lease_token, Event.COMPLETE
            )
            complete = partial(operations.settle_one, settlement=completion, now=utc_now())
            try:  # at once, through the node that did not take the claim
                first.run(complete, owner_id=ALICE)
            except DomainError:
                refused += 1
        assert refused == 0
    finally:
        _dispose(dbs)


def test_a_certification_conflict_at_commit_is_replayed(cluster: tuple[Path, list[str]]) -> None:
    """Node 1's transaction loses to node 2's write of the same row: 1213 at COMMIT, replayed."""
    _, urls = cluster
    on = _migrated(urls, "ops_certify")
    (db,) = dbs = _databases(on[:1])
    now = utc_now()
    try:
        db.run(
            lambda tx: tx.execute(
                insert(workspace.JOBS).values(owner_user_id=SCOPE_OWNER),
                dict(id="j" * 32, title="t", company="", description="d", created_at=now,
                     updated_at=now),
            ),
            owner_id=ALICE,
        )  # fmt: skip
        where_raised: list[str] = []
        dialect = db.engine.dialect
        real_commit = dialect.do_commit

        def do_commit(dbapi_connection: Any) -> None:
            try:
                real_commit(dbapi_connection)
            except pymysql.err.OperationalError as exc:
                where_raised.append(f"COMMIT {exc.args[0]}")
                raise

        dialect.do_commit = do_commit  # type: ignore[method-assign]
        attempts = 0

        def rename(tx: Tx) -> None:
            nonlocal attempts
            attempts += 1
            renamed = update(workspace.JOBS).where(
                workspace.JOBS.c.id == "j" * 32, workspace.JOBS.c.owner_user_id == SCOPE_OWNER
            )
            tx.execute(renamed.values(title=f"node1-{attempts}"))
            if attempts == 1:  # node 2 writes the same row and commits first
                assert _execute(on[1], "UPDATE jobs SET title = 'node2' WHERE id = %s", "j" * 32)

        db.run(rename, owner_id=ALICE)
        assert attempts == 2
        assert where_raised == ["COMMIT 1213"]
        assert db.retries[1213] == 1
        assert _scalar(on[2], "SELECT title FROM jobs") == "node1-2"
    finally:
        _dispose(dbs)


def _execute(url: str, statement: str, *arguments: object) -> int:
    """Run one write on a node and commit it; how many rows it changed."""
    with _causal_connection(url) as conn, conn.cursor() as cursor:
        changed: int = cursor.execute(statement, arguments)
        conn.commit()
        return changed


def test_admission_limits_hold_with_admissions_through_two_nodes(
    cluster: tuple[Path, list[str]],
) -> None:
    """Rounds of concurrent admissions, alternately through node 1 and node 2.

    After each round the counts are read on node 3, then every operation is
    cancelled so that the next round races for the capacity again. Without the
    reservation's write on the control row, a round lets a user past the
    per-user limit now and then (the row lock does not reach the other node).
    """
    _, urls = cluster
    on = _migrated(urls, "ops_admit")
    dbs = _databases(on[:2], pool_size=8)
    limits = Limits(per_user=2, global_=5)
    owners = [f"user{number}" for number in range(4)]
    rounds = 4
    now = utc_now()
    try:
        jobs: dict[str, list[str]] = {}
        for owner in owners:
            entitle(dbs[0], owner)
            jobs[owner] = [
                dbs[0].run(
                    lambda tx: workspace.create_job(tx, "Engineer", "Acme", "text", now).id,
                    owner_id=owner,
                )
                for _ in range(4)
            ]
        work = [(owner, job) for job_index in range(4) for owner in owners
                for job in jobs[owner][job_index:job_index + 1]]  # fmt: skip
        admitted = refused = 0
        most_per_owner = most_overall = 0

        busy = 0  # lost certification on every attempt: UNAVAILABLE, the client retries

        def one(number: int, owner: str, job: str) -> bool:
            nonlocal busy
            db = dbs[number % 2]  # every other admission through the other node
            try:
                db.run(
                    lambda tx: admit(tx, AdmitRequest("strategy.snapshot", job), limits, utc_now()),
                    owner_id=owner,
                )
            except CapacityExceeded:
                return False
            except Unavailable:
                busy += 1
                return False
            return True

        for _ in range(rounds):
            with ThreadPoolExecutor(max_workers=len(work)) as pool:
                results = list(pool.map(one, range(len(work)), *zip(*work, strict=True)))
            admitted += sum(results)
            refused += len(results) - sum(results)
            per_owner = _scalar(
                on[2],
                "SELECT MAX(n) FROM (SELECT COUNT(*) AS n FROM user_operations"
                " WHERE state = 'queued' GROUP BY owner_user_id) AS counts",
            )
            overall = _scalar(on[2], "SELECT COUNT(*) FROM user_operations WHERE state = 'queued'")
            assert isinstance(per_owner, int)
            assert isinstance(overall, int)
            most_per_owner, most_overall = (
                max(most_per_owner, per_owner),
                max(most_overall, overall),
            )
            assert overall == sum(results)  # every admission answered admitted is there
            _execute(on[2], "UPDATE user_operations SET state = 'cancelled'")
        retries = sum(db.retries[1213] for db in dbs)
        report(
            f"\nadmission via 2 nodes: {rounds} rounds of {len(work)}, {admitted} admitted,"
            f" {refused} refused, {busy} busy, {retries} certification retries;"
            f" most active per user {most_per_owner} (limit {limits.per_user}),"
            f" overall {most_overall} (limit {limits.global_})"
        )
        assert most_per_owner <= limits.per_user
        assert most_overall <= limits.global_
        assert admitted == rounds * limits.global_ or busy > 0  # the limit reached each round
    finally:
        _dispose(dbs)


def test_token_budgets_hold_with_admissions_through_two_nodes(
    cluster: tuple[Path, list[str]],
) -> None:
    """Sixteen admissions at once, alternately through node 1 and node 2, with room in
    user0's own budget for two analyses and in the global one for six (ADR 0041). Read on
    node 3: no budget's reserved + spent passed it, and each reservation has its operation.
    """
    _, urls = cluster
    on = _migrated(urls, "ops_budgets")
    dbs = _databases(on[:2], pool_size=8)
    texts = {"title": "Engineer", "company": "Acme", "description": "text"}
    expected = budgets.expected_tokens(budgets.input_tokens(subjects.JOB, texts))
    limits = Limits(per_user=20, global_=50, global_daily_tokens=6 * expected + 10)
    owner_limit = 2 * expected + 10
    owners = [f"user{number}" for number in range(4)]
    now = utc_now()
    try:
        work: list[tuple[str, str]] = []
        for owner in owners:
            entitle(dbs[0], owner)
            for _ in range(4):
                job = dbs[0].run(
                    lambda tx: workspace.create_job(tx, "Engineer", "Acme", "text", now).id,
                    owner_id=owner,
                )
                work.append((owner, job))
        dbs[0].run(
            lambda tx: budget_store.set_override(tx, owner_limit, set_by="test", now=now),
            owner_id="user0",
        )
        busy = 0

        def one(number: int, owner: str, job: str) -> bool:
            nonlocal busy
            try:
                dbs[number % 2].run(
                    lambda tx: admit(tx, AdmitRequest("strategy.snapshot", job), limits, utc_now()),
                    owner_id=owner,
                )
            except CapacityExceeded:
                return False
            except Unavailable:
                busy += 1
                return False
            return True

        with ThreadPoolExecutor(max_workers=len(work)) as pool:
            results = list(pool.map(one, range(len(work)), *zip(*work, strict=True)))
        user0 = _scalar(
            on[2], "SELECT reserved + spent FROM token_budget_days WHERE owner_user_id = 'user0'"
        )
        everyone = _scalar(on[2], "SELECT SUM(reserved + spent) FROM token_budget_days")
        reserved_on_operations = _scalar(on[2], "SELECT SUM(reserved_tokens) FROM user_operations")
        retries = sum(db.retries[1213] for db in dbs)
        report(
            f"\ntoken budgets via 2 nodes: {len(work)} admissions, {sum(results)} admitted,"
            f" {busy} busy, {retries} certification retries; user0 used {user0} of"
            f" {owner_limit}, everyone {everyone} of {limits.global_daily_tokens}"
        )
        assert isinstance(user0, int)
        assert user0 <= owner_limit
        assert int(str(everyone)) <= (limits.global_daily_tokens or 0)
        assert int(str(everyone)) == int(str(reserved_on_operations)) == sum(results) * expected
        assert sum(results) == 6 or busy > 0  # the global budget reached
    finally:
        _dispose(dbs)


def test_concurrency_limits_hold_with_claims_through_two_nodes(
    cluster: tuple[Path, list[str]],
) -> None:
    """Eight claim loops at once, four through node 1 and four through node 2, over a
    type limited to 2 per owner's key and one limited to 3 in all (ADR 0048): the slot
    rows both nodes write conflict at certification, so the limits hold across nodes.
    Read on node 3: exactly the limits run, no more."""
    _, urls = cluster
    on = _migrated(urls, "ops_limits")
    dbs = _databases(on[:2], pool_size=8)
    keyed, capped = "fleet.keyed", "fleet.capped"
    limits = {keyed: Concurrency(per_key=2), capped: Concurrency(total=3)}
    try:
        for n in range(12):
            for task_type in (keyed, capped):
                request = operations.CreateRequest(
                    task_type=task_type,
                    idempotency_key=f"{task_type}-{n}",
                    subject_type="job",
                    subject_id=f"s{n}",
                    concurrency_key="k" if task_type == keyed else "",
                )
                dbs[n % 2].run(partial(_create, request=request), owner_id=ALICE)
        claimed: Counter[str] = Counter()
        busy = 0

        def loop(number: int) -> None:
            nonlocal busy
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                try:
                    taken = dbs[number % 2].run(
                        lambda tx: operations.claim(
                            tx, [keyed, capped], 60, utc_now(), limit=4, limits=limits
                        ),
                        owner_id=None,
                    )
                except Unavailable:
                    busy += 1
                    continue
                for claim in taken:
                    claimed[claim.operation.task_type] += 1

        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(loop, range(8)))
        running = dict(
            _rows(
                on[2],
                "SELECT task_type, COUNT(*) FROM user_operations WHERE state = 'running'"
                " GROUP BY task_type",
            )
        )
        retries = sum(db.retries[1213] for db in dbs)
        report(
            f"\nconcurrency limits via 2 nodes: claimed {dict(claimed)}, running {running},"
            f" {busy} busy, {retries} certification retries"
        )
        assert claimed == {keyed: 2, capped: 3}
        assert running == {keyed: 2, capped: 3}
    finally:
        _dispose(dbs)


@pytest.fixture(scope="module")
def conformance_database(cluster: tuple[Path, list[str]]) -> list[str]:
    """One fresh database the conformance cases share, by URL on each node."""
    return _migrated(cluster[1], "ops_conformance")


@pytest.mark.parametrize("case", CASES, ids=[case.__name__ for case in CASES])
def test_the_storage_conformance_suite_holds_on_each_node(
    conformance_database: list[str], case: Callable[[Database], None]
) -> None:
    """Every case of the suite SQLite and MariaDB pass, on one shared database, through
    the three nodes in turn (the claims spread, as on any Galera node)."""
    node = CASES.index(case) % len(conformance_database)
    (db,) = _databases([conformance_database[node]])
    try:
        case(db)
    finally:
        db.dispose()


@pytest.mark.parametrize("spread", [False, True], ids=["head-of-queue", "spread"])
def test_claims_through_three_nodes_conflict_figure(
    cluster: tuple[Path, list[str]], monkeypatch: pytest.MonkeyPatch, spread: bool
) -> None:
    """1213 retries per 1,000 claims with two claimers on each node: a printed figure."""
    _, urls = cluster
    name = "ops_claims_spread" if spread else "ops_claims_head"
    on = _migrated(urls, name)
    monkeypatch.setattr(claims, "spreads", lambda _tx: spread)
    dbs = _databases(on, pool_size=4)
    total = 300
    try:
        for number in range(total):
            request = operations.CreateRequest(
                task_type="test.claim", idempotency_key=f"c{number}", subject_type="job",
                subject_id="j",
            )  # fmt: skip
            dbs[number % 3].run(partial(_create, request=request), owner_id=ALICE)
        claimed: list[str] = []
        busy = 0  # claims that lost certification on every attempt (UNAVAILABLE database_busy)

        def claimer(db: Database) -> None:
            nonlocal busy
            while True:
                try:
                    taken = db.run(
                        lambda tx: operations.claim(tx, ["test.claim"], 60, utc_now()),
                        owner_id=None,
                    )
                except Unavailable:
                    busy += 1
                    continue
                if not taken:
                    return
                claimed.append(taken[0].operation.id)

        with ThreadPoolExecutor(max_workers=6) as pool:
            for future in [pool.submit(claimer, dbs[n % 3]) for n in range(6)]:
                future.result()
        retries = sum(db.retries[1213] for db in dbs)
        per_thousand = 1000 * retries / max(len(claimed), 1)
        how = "spread over the first 8" if spread else "head of the queue"
        report(
            f"\nclaims via 3 nodes ({how}): {len(claimed)} claims,"
            f" {per_thousand:.0f} 1213 retries per 1,000 claims, {busy} gave up after 8 tries"
        )
        assert len(claimed) == len(set(claimed)) == total  # each claimed once
    finally:
        _dispose(dbs)


# ---- the drill: the product spread over the three nodes, one node killed under load ------

DRILL_USERS = 10
DRILL_JOBS_PER_USER = 20
DRILL_TOTAL = DRILL_USERS * DRILL_JOBS_PER_USER
DRILL_USER_LIMIT, DRILL_GLOBAL_LIMIT = 3, 12
DRILL_SETTLE_SECONDS = 60.0
DRILL_JWT_SECRET = "galera-drill-jwt-secret-0123456789abcdef"
DRILL_SERVICES = ("operations", "notifications", "workspace", "ai-admission")
# Replica r of service s talks to node (s + r) % 3: each node serves some of each kind.
DRILL_KILLED_NODE = 2  # 1-based, as galera.sh counts; operations-1 and notifications-0 use it


@dataclass
class DrillFigures:
    statuses: Counter[int] = field(default_factory=Counter)
    max_global: int = 0
    max_user: int = 0
    samples: int = 0
    stall_seconds: float = 0.0
    refused_writes: int = 0


def test_the_product_spread_over_the_nodes_survives_a_node_crash(
    cluster: tuple[Path, list[str]],
) -> None:
    where, urls = cluster
    on = _migrated(urls, "ops_drill")
    ports = {name: [free_port() for _ in range(2)] for name in [*DRILL_SERVICES, "gateway"]}
    model_bind = f"127.0.0.1:{free_port()}"
    env = {
        "OPS_DATABASE_URL": on[0],
        **key_env(),  # the gateway and the AI worker get their own key from it
        "OPS_JWT_SECRET": DRILL_JWT_SECRET,
        "OPS_LOG_LEVEL": "warning",
        "OPS_LOG_JSON": "true",
        "OPS_AI_USER_LIMIT": str(DRILL_USER_LIMIT),
        "OPS_AI_GLOBAL_LIMIT": str(DRILL_GLOBAL_LIMIT),
        "OPS_DEV_MODEL_BIND": model_bind,
        "OPS_AI_LOCAL_URL": f"http://{model_bind}/v1",
        "OPS_WORKERS_AI_OPERATIONS_ENABLED": "true",
        "OPS_WORKER_CONCURRENCY": "4",
        "OPS_WORKER_LEASE_SECONDS": "5",
        "OPS_WORKER_POLL_SECONDS": "0.05",
        "OPS_WORKER_TASK_TIMEOUT_SECONDS": "20",
        "OPS_HOST_STORE_DIR": "",
        "OPS_AI_EXTERNAL_URL": "",
    }
    for name in DRILL_SERVICES:
        env[service_variable(name, "target")] = "ipv4:" + ",".join(
            f"127.0.0.1:{port}" for port in ports[name]
        )
    logs = LogTee()
    stack = Stack(env, specs=[], out=logs)
    gateways = [f"http://127.0.0.1:{port}" for port in ports["gateway"]]
    steady = Database(on[0], pool_size=4)  # node 1 stays up: the test's own reads
    figures = DrillFigures()
    stop = threading.Event()
    watchers: list[threading.Thread] = []
    try:
        for number, name in enumerate(DRILL_SERVICES):
            for replica, port in enumerate(ports[name]):
                node = (number + replica) % 3
                extra = {
                    service_variable(name, "bind"): f"127.0.0.1:{port}",
                    "OPS_DATABASE_URL": on[node],
                    "OPS_LOG_LEVEL": "info" if name == "operations" else "warning",
                }
                stack.start_one(name, label=f"{name}-{replica}", extra_env=extra)
        stack.start_one("dev-model")
        for index in range(2):
            stack.start_one("ai-worker", label=f"ai-worker-{index}")
            bind = {"OPS_GATEWAY_BIND": f"127.0.0.1:{ports['gateway'][index]}"}
            stack.start_one("gateway", label=f"gateway-{index}", extra_env=bind)
        stack.wait_healthy(
            timeout=90,
            checks=[
                *(f"grpc:127.0.0.1:{port}" for name in DRILL_SERVICES for port in ports[name]),
                f"http:http://{model_bind}/v1/models",
                *(f"http:{url}/readyz" for url in gateways),
            ],
        )
        owners = [f"drill-user-{index:02d}" for index in range(DRILL_USERS)]
        jobs: dict[str, list[str]] = {}
        now = utc_now()
        for owner in owners:
            entitle(steady, owner)
            jobs[owner] = [
                steady.run(
                    lambda tx: workspace.create_job(tx, "Engineer", "Acme", "text", now).id,
                    owner_id=owner,
                )
                for _ in range(DRILL_JOBS_PER_USER)
            ]
        _execute(on[0], "CREATE TABLE drill_probe (id INT PRIMARY KEY, n INT NOT NULL)")
        _execute(on[0], "INSERT INTO drill_probe VALUES (1, 0)")
        watchers += [
            threading.Thread(target=_watch_capacity, args=(steady, figures, stop), daemon=True),
            threading.Thread(target=_probe_writes, args=(on[0], figures, stop), daemon=True),
        ]
        for thread in watchers:
            thread.start()

        admitted: dict[str, str] = {}  # operation id -> owner
        lock = threading.Lock()
        half_way = threading.Event()

        def drive(owner: str) -> None:
            with httpx.Client(timeout=15) as client:
                for turn, job in enumerate(jobs[owner]):
                    while True:
                        gateway = gateways[turn % 2]
                        try:
                            response = client.post(
                                f"{gateway}/api/jobs/{job}/strategy-snapshot",
                                json={},
                                headers={
                                    "Authorization": f"Bearer {_drill_token(owner)}",
                                    "Idempotency-Key": f"drill-{job}",
                                },
                            )
                        except httpx.TransportError:
                            turn += 1
                            time.sleep(0.1)
                            continue
                        with lock:
                            figures.statuses[response.status_code] += 1
                        if response.status_code == 202:
                            with lock:
                                admitted[str(response.json()["operation_id"])] = owner
                                if len(admitted) >= DRILL_TOTAL // 2:
                                    half_way.set()
                            break
                        # Over capacity (429), the database away (503) or stalled past the
                        # call's deadline (504): the same key again. Never a 500.
                        assert response.status_code in (429, 503, 504), response.text
                        time.sleep(0.1)

        started = time.monotonic()
        with ThreadPoolExecutor(DRILL_USERS) as pool:
            drivers = [pool.submit(drive, owner) for owner in owners]
            assert half_way.wait(DRILL_SETTLE_SECONDS), f"admitted {len(admitted)}"
            killed_at = time.monotonic() - started
            _galera("kill", str(DRILL_KILLED_NODE), cluster=where)
            time.sleep(3.0)  # writes stall, the processes on the node answer 503
            _galera("start", "3", cluster=where)  # recovered position, rejoins by IST
            recovered_at = time.monotonic() - started
            for driver in drivers:
                driver.result(timeout=DRILL_SETTLE_SECONDS)

        def active() -> int:
            value = _scalar(
                on[0],
                "SELECT COUNT(*) FROM user_operations WHERE state IN"
                " ('queued', 'running', 'waiting_for_retry', 'waiting_for_external_fallback')",
            )
            assert isinstance(value, int)
            return value

        deadline = time.monotonic() + DRILL_SETTLE_SECONDS
        while (stuck := active()) and time.monotonic() < deadline:
            time.sleep(0.3)
        wall = time.monotonic() - started
    finally:
        stop.set()
        for thread in watchers:
            thread.join(10)
        stack.stop(grace=10)
        steady.dispose()

    rows = _rows(on[0], "SELECT id, state, attempt, max_attempts FROM user_operations")
    notes = Counter(row[0] for row in _rows(on[0], "SELECT operation_id FROM ai_workspace_notes"))
    notices = Counter(row[0] for row in _rows(on[0], "SELECT operation_id FROM user_notifications"))
    states = {str(row[0]): str(row[1]) for row in rows}
    over_attempts = [row[0] for row in rows if int(row[2]) > int(row[3])]
    succeeded = {op for op, state in states.items() if state == "succeeded"}
    lost = set(admitted) - set(states)
    doubled = [op for op, n in notes.items() if n > 1] + [op for op, n in notices.items() if n > 1]
    # A claim of one operation logs "operation_claimed"; a batch of more, one
    # "operations_claimed" line with its count.
    claims = sum(
        len(logs.events(f"operations-{r}", "operation_claimed"))
        + sum(int(event["count"]) for event in logs.events(f"operations-{r}", "operations_claimed"))
        for r in range(2)
    )
    replays = sum(
        1
        for r in range(2)
        for event in logs.events(f"operations-{r}", "transaction_retry")
        if event.get("code") == 1213
    )
    report(
        f"\ngalera drill: {len(admitted)} operations over HTTP from {DRILL_USERS} users, node"
        f" {DRILL_KILLED_NODE} SIGKILLed at {killed_at:.1f} s and recovered by {recovered_at:.1f}"
        f" s, all settled in {wall:.1f} s; outcomes {dict(Counter(states.values()))};"
        f" lost {len(lost)}, stuck {stuck}, doubled {len(doubled)}, over attempts"
        f" {len(over_attempts)}; {1000 * replays / max(claims, 1):.0f} 1213 replays per 1,000"
        f" claims ({claims} claims); longest write stall {figures.stall_seconds:.1f} s"
        f" ({figures.refused_writes} probe writes refused meanwhile);"
        f" capacity max {figures.max_global}/{DRILL_GLOBAL_LIMIT} global,"
        f" {figures.max_user}/{DRILL_USER_LIMIT} per user ({figures.samples} samples);"
        f" gateway answers {dict(figures.statuses)}"
    )
    assert len(admitted) == DRILL_TOTAL
    assert lost == set()
    assert stuck == 0
    assert doubled == []
    assert over_attempts == []
    assert set(states.values()) <= {"succeeded", "failed", "cancelled"}
    assert {op: notes[op] for op in succeeded} == dict.fromkeys(succeeded, 1)
    assert dict(notices) == dict.fromkeys(states, 1)  # one notification each
    assert figures.max_global <= DRILL_GLOBAL_LIMIT
    assert figures.max_user <= DRILL_USER_LIMIT
    assert figures.statuses[500] == 0
    assert set(figures.statuses) <= {202, 429, 503, 504}


def _drill_token(owner: str) -> str:
    return mint_user_token(DRILL_JWT_SECRET, owner, 600)


def _rows(url: str, query: str) -> list[tuple[Any, ...]]:
    with _causal_connection(url) as conn, conn.cursor() as cursor:
        cursor.execute(query)
        return list(cursor.fetchall())


def _watch_capacity(db: Database, figures: DrillFigures, stop: threading.Event) -> None:
    query = text(
        "SELECT owner_user_id, COUNT(*) FROM user_operations WHERE state IN"
        " ('queued', 'running', 'waiting_for_retry', 'waiting_for_external_fallback')"
        " GROUP BY owner_user_id"
    )
    while not stop.wait(0.05):
        try:
            with db.engine.connect() as connection:
                counts = [int(row[1]) for row in connection.execute(query)]
        except OperationalError:
            continue  # the cluster stalls while it evicts the killed node
        figures.max_global = max(figures.max_global, sum(counts))
        figures.max_user = max(figures.max_user, max(counts, default=0))
        figures.samples += 1


# What node 1 answers while the cluster re-forms without the killed node: not in
# the primary component (1180 on a write, 1047 before it is ready), a certification
# conflict (1213). Each is a write that has not landed yet, tried again.
PROBE_REFUSALS = frozenset({1047, 1180, 1213})


def _probe_writes(url: str, figures: DrillFigures, stop: threading.Event) -> None:
    """One small write on node 1 every 50 ms, tried again while refused; the longest
    time from a write's first try to its landing is how long writes stalled."""
    parsed = make_url(url)
    conn = pymysql.connect(
        host=parsed.host, port=parsed.port or 3306, user="root", database=parsed.database,
        autocommit=True,
    )  # fmt: skip
    first_try: float | None = None  # of the write that has not landed yet
    try:
        with conn.cursor() as cursor:
            while not stop.wait(0.05):
                if first_try is None:
                    first_try = time.monotonic()
                try:
                    cursor.execute("UPDATE drill_probe SET n = n + 1 WHERE id = 1")
                except pymysql.err.OperationalError as refused:
                    if refused.args[0] not in PROBE_REFUSALS:
                        raise
                    figures.refused_writes += 1
                    continue
                figures.stall_seconds = max(figures.stall_seconds, time.monotonic() - first_try)
                first_try = None
    finally:
        if first_try is not None:  # still refused when the drill ended
            figures.stall_seconds = max(figures.stall_seconds, time.monotonic() - first_try)
        conn.close()
