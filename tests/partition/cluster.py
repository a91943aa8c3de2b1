"""A three-node Galera cluster, one mariadbd in each namespace of a ``Network``.

The product's services reach node ``i`` at ``mysql+pymysql://root@<address>:3306/``
through the bridge; the harness itself talks to each node over its Unix socket
(a socket is a file, not an address: it works whatever the network says), so
it can ask a cut-off node what it thinks. The settings are the ones
docs/operations.md "Running on Galera" asks for (``SETTINGS``); the failure
detector runs faster than Galera's defaults so that a 20-s fault is seen.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pymysql

from tests.partition.netns import Network

PROVIDER = Path("/usr/lib/galera/libgalera_smm.so")
SQL_PORT = 3306
GROUP_PORT = 4567  # IST on +1, SST on 4444
DATABASE = "ops_jepsen"

# Durability: an acknowledged commit is on this node's disk (Jepsen, MDEV-38974: the
# recommended value 2 acknowledges before the flush). sync_binlog matters only with
# log_bin on; it is set so that turning binary logs on keeps the promise.
SETTINGS = """\
sync_binlog=1
binlog_format=ROW
default_storage_engine=InnoDB
innodb_autoinc_lock_mode=2
innodb_buffer_pool_size=48M
innodb_log_file_size=16M
skip-name-resolve
max_connections=300
"""
# Seen within ~2-4 s: a node that stops answering is suspected, then evicted.
FAILURE_DETECTOR = (
    "evs.keepalive_period=PT0.5S;evs.inactive_check_period=PT0.5S;"
    "evs.suspect_timeout=PT2S;evs.inactive_timeout=PT4S;evs.install_timeout=PT4S"
)


def unavailable() -> str | None:
    """Why this machine cannot run the cluster, or None."""
    if os.geteuid() != 0:
        return "namespaces, iptables and the mysql user need root"
    if not PROVIDER.exists() or shutil.which("mariadbd") is None:
        return "galera-4 and mariadb-server are not installed"
    if shutil.which("ip") is None or shutil.which("iptables") is None:
        return "iproute2 and iptables are not installed"
    return None


@dataclass
class Cluster:
    network: Network
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="durable-ops-jepsen-")))
    # 1: each acknowledged commit is on the node's disk. 0 (``--flush-log-at-trx-commit 0``)
    # writes the log about once a second, so a SIGKILL of every node loses the last second:
    # the run that shows what the setting is for.
    flush_log_at_trx_commit: int = 1
    processes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    paused: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.root.chmod(0o755)  # the nodes run as mysql

    # ---- where things are -------------------------------------------------------------------

    def node_dir(self, node: int) -> Path:
        return self.root / f"node{node}"

    def socket(self, node: int) -> str:
        return str(self.node_dir(node) / "mariadbd.sock")

    def url(self, node: int, database: str = DATABASE) -> str:
        return f"mysql+pymysql://root@{self.network.address(node)}:{SQL_PORT}/{database}"

    def _config(self, node: int) -> str:
        base = self.node_dir(node)
        address = self.network.address(node)
        peers = ",".join(f"{self.network.address(i)}:{GROUP_PORT}" for i in self.network.indexes)
        return (
            f"[mariadbd]\ndatadir={base}/data\nsocket={base}/mariadbd.sock\n"
            f"pid-file={base}/mariadbd.pid\nlog-error={base}/error.log\n"
            f"port={SQL_PORT}\nbind-address={address}\nuser=mysql\n{SETTINGS}"
            f"innodb_flush_log_at_trx_commit={self.flush_log_at_trx_commit}\n"
            f"wsrep_on=ON\nwsrep_provider={PROVIDER}\nwsrep_cluster_name=durable-ops-jepsen\n"
            f"wsrep_cluster_address=gcomm://{peers}\nwsrep_node_name=node{node}\n"
            f"wsrep_node_address={address}:{GROUP_PORT}\n"
            f'wsrep_provider_options="gmcast.listen_addr=tcp://{address}:{GROUP_PORT};'
            f'ist.recv_addr={address}:{GROUP_PORT + 1};{FAILURE_DETECTOR}"\n'
            f"wsrep_sst_method=rsync\nwsrep_sst_receive_address={address}:4444\n"
        )

    # ---- life -----------------------------------------------------------------------------

    def _install(self, template: Path, attempts: int = 2) -> None:
        """The system tables, once, into ``template``. Tried again on a fresh directory: once
        in a CI run, started beside the Galera containers of another test process, it
        exited 1 with its reason in a log the clean-up removed; what it said is printed."""
        for attempt in range(1, attempts + 1):
            shutil.rmtree(template, ignore_errors=True)
            template.mkdir()
            done = subprocess.run(
                ["mariadb-install-db", f"--defaults-file={self.node_dir(1)}/my.cnf",
                 f"--datadir={template}", "--auth-root-authentication-method=normal",
                 "--skip-test-db"],
                capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            if done.returncode == 0:
                return
            log = self.node_dir(1) / "error.log"
            logged = log.read_text(errors="replace") if log.exists() else ""
            said = f"mariadb-install-db exited {done.returncode}: {done.stderr}{logged}"[-3000:]
            print(f"attempt {attempt}: {said}")
            if attempt == attempts:
                raise RuntimeError(said)
            time.sleep(1)

    def start(self, timeout: float = 120.0) -> None:
        """A new cluster: node 1 bootstraps, the others join by SST one after the other."""
        template = self.root / "template"
        for node in self.network.indexes:
            self.node_dir(node).mkdir()
            (self.node_dir(node) / "my.cnf").write_text(self._config(node))
        self._install(template)
        shutil.copytree(template, self.node_dir(1) / "data", symlinks=True)
        shutil.rmtree(template)
        subprocess.run(["chown", "-R", "mysql:mysql", str(self.root)], check=True)
        self.launch(1, "--wsrep-new-cluster")
        self.wait_synced(1, timeout)
        prefix = self.network.prefix
        self.admin(
            1,
            f"CREATE USER IF NOT EXISTS 'root'@'{prefix}.%'",
            f"GRANT ALL PRIVILEGES ON *.* TO 'root'@'{prefix}.%' WITH GRANT OPTION",
            f"CREATE DATABASE IF NOT EXISTS {DATABASE} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
        )
        for node in self.network.indexes[1:]:
            (self.node_dir(node) / "data").mkdir()
            subprocess.run(["chown", "-R", "mysql:mysql", str(self.node_dir(node))], check=True)
            self.launch(node)
            self.wait_synced(node, timeout)

    def launch(self, node: int, *extra: str) -> None:
        process = subprocess.Popen(
            ["ip", "netns", "exec", self.network.namespace(node), "mariadbd",
             f"--defaults-file={self.node_dir(node)}/my.cnf", *extra],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, cwd="/",
        )  # fmt: skip
        self.processes[node] = process

    def alive(self, node: int) -> bool:
        process = self.processes.get(node)
        return process is not None and process.poll() is None

    def kill(self, node: int) -> None:
        """SIGKILL, as a crash would."""
        process = self.processes[node]
        self.resume(node)
        process.kill()
        process.wait(30)

    def pause(self, node: int) -> None:
        os.kill(self.processes[node].pid, signal.SIGSTOP)
        self.paused.add(node)

    def resume(self, node: int) -> None:
        if node in self.paused and self.alive(node):
            os.kill(self.processes[node].pid, signal.SIGCONT)
        self.paused.discard(node)

    def recovered_position(self, node: int) -> str:
        """The last committed position a crashed node's InnoDB logs hold (uuid:seqno)."""
        log = self.node_dir(node) / "recover.log"
        log.unlink(missing_ok=True)
        subprocess.run(
            ["mariadbd", f"--defaults-file={self.node_dir(node)}/my.cnf", "--wsrep-recover",
             f"--log-error={log}"],
            capture_output=True, timeout=120, check=False,
        )  # fmt: skip
        subprocess.run(["chown", "-R", "mysql:mysql", str(self.node_dir(node))], check=True)
        found = re.findall(r"WSREP: Recovered position: *(\S+)", log.read_text(errors="replace"))
        return found[-1] if found else ""

    def restart(self, node: int, timeout: float = 120.0) -> None:
        """Bring a killed node back from its recovered position: it rejoins by IST."""
        position = self.recovered_position(node)
        self.launch(node, *([f"--wsrep_start_position={position}"] if position else []))
        self.wait_synced(node, timeout)

    def restart_all(self, timeout: float = 180.0) -> None:
        """After every node crashed: each from its recovered position at once; Galera's
        ``pc.recovery`` (on by default) re-forms the last primary component from
        ``gvwstate.dat`` once all its members are back, with no node bootstrapped by hand."""
        positions = {node: self.recovered_position(node) for node in self.network.indexes}
        for node, position in positions.items():
            self.launch(node, *([f"--wsrep_start_position={position}"] if position else []))
        self.wait_all_synced(timeout)

    def stop(self) -> None:
        for node in sorted(self.processes, reverse=True):
            process = self.processes[node]
            self.resume(node)
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    # ---- asking a node ----------------------------------------------------------------------

    def admin(self, node: int, *statements: str) -> list[tuple[object, ...]]:
        """Run statements over the node's socket, autocommit; the last one's rows."""
        rows: list[tuple[object, ...]] = []
        with (
            pymysql.connect(unix_socket=self.socket(node), user="root", autocommit=True,
                            connect_timeout=3, read_timeout=10, write_timeout=10) as conn,
            conn.cursor() as cursor,
        ):  # fmt: skip
            for statement in statements:
                cursor.execute(statement)
                rows = list(cursor.fetchall())
        return rows

    def status(self, node: int, name: str) -> str:
        try:
            rows = self.admin(node, f"SHOW STATUS LIKE '{name}'")
        except pymysql.err.Error:
            return "down"
        return str(rows[0][1]) if rows else ""

    def state(self, node: int) -> str:
        if not self.alive(node):
            return "down"
        if node in self.paused:
            return "paused"
        return self.status(node, "wsrep_local_state_comment")

    def wait_synced(self, node: int, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while self.state(node) != "Synced" or self.status(node, "wsrep_ready") != "ON":
            if not self.alive(node):
                raise RuntimeError(f"node {node} exited: {self.log_tail(node)}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"node {node} not Synced in {timeout:.0f} s: "
                                   f"{self.log_tail(node)}")  # fmt: skip
            time.sleep(0.3)

    def wait_all_synced(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        for node in self.network.indexes:
            self.wait_synced(node, max(deadline - time.monotonic(), 1.0))
        while self.status(1, "wsrep_cluster_size") != str(self.network.nodes):
            if time.monotonic() > deadline:
                raise TimeoutError("the cluster did not re-form with every node")
            time.sleep(0.3)

    def log_tail(self, node: int, lines: int = 15) -> str:
        log = self.node_dir(node) / "error.log"
        if not log.exists():
            return "(no log)"
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
