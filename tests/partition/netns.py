"""A network of namespaces on one bridge, and the faults cut into it with iptables.

Node ``i`` (1-based) lives in namespace ``<tag>n<i>`` at ``<prefix>.<10 + i>``; the
root namespace (where the product's services and the clients run) is the
bridge's own address ``<prefix>.1``. Every fault is a rule in a node's own
``INPUT``/``OUTPUT`` chains (a namespace has its own tables), so healing is a
flush there and nothing of the host's firewall changes except one ``FORWARD``
rule: once dockerd has run the host forwards bridged frames through iptables
with a DROP policy, and frames between two veths of this bridge need it
(ARCHITECTURE.md, "Verified here on 2026-12-04"). This kernel has no ``netem``:
loss is iptables' ``statistic`` match, and there is no delay emulation.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = "root"  # the root namespace, as a party to a partition


def unavailable() -> str | None:
    """Why this machine cannot make a network without the FORWARD rule
    (``between_nodes=False``), or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2 is not installed"
    return None


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return done


@dataclass
class Network:
    tag: str  # short (names of links are at most 15 characters): "dj0"
    prefix: str  # the /24's first three numbers: "10.77.0"
    nodes: int = 3
    # Whether nodes reach each other: that needs the FORWARD rule (iptables). Without it
    # each node still reaches the root namespace and back, which is all some tests need.
    between_nodes: bool = True
    faults: list[str] = field(default_factory=list)  # what is cut now, for the report

    @property
    def bridge(self) -> str:
        return f"{self.tag}br"

    @property
    def gateway(self) -> str:
        return f"{self.prefix}.1"

    def namespace(self, node: int) -> str:
        return f"{self.tag}n{node}"

    def address(self, node: int | str) -> str:
        return self.gateway if node == ROOT else f"{self.prefix}.{10 + int(node)}"

    @property
    def indexes(self) -> list[int]:
        return list(range(1, self.nodes + 1))

    def _forward_rule(self) -> list[str]:
        return ["FORWARD", "-i", self.bridge, "-o", self.bridge, "-j", "ACCEPT"]

    def up(self) -> None:
        self.down()  # what a run killed before its cleanup left behind
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        if self.between_nodes:
            sh("iptables", "-I", *self._forward_rule())
        hosts = "127.0.0.1 localhost\n" + "".join(
            f"{self.address(i)} node{i}\n" for i in self.indexes
        )
        for i in self.indexes:
            ns, outside, inside = self.namespace(i), f"{self.tag}v{i}", f"{self.tag}p{i}"
            # rsync SST resolves names: without these, 10 s of DNS timeouts per step.
            etc = Path("/etc/netns") / ns
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(hosts)
            (etc / "resolv.conf").write_text("")
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
            sh("ip", "link", "set", outside, "master", self.bridge)
            sh("ip", "link", "set", outside, "up")
            sh("ip", "link", "set", inside, "netns", ns)
            self.run_in(i, "ip", "addr", "add", f"{self.address(i)}/24", "dev", inside)
            self.run_in(i, "ip", "link", "set", inside, "up")
            self.run_in(i, "ip", "link", "set", "lo", "up")

    def down(self) -> None:
        """Remove everything ``up`` made; safe to call when some or all of it is gone."""
        if self.between_nodes:
            while sh("iptables", "-D", *self._forward_rule(), check=False).returncode == 0:
                pass
        for i in self.indexes:
            # Whatever still runs in a namespace of ours (a node a killed run left behind)
            # would keep the namespace alive after its name is gone.
            for pid in sh("ip", "netns", "pids", self.namespace(i), check=False).stdout.split():
                sh("kill", "-9", pid, check=False)
            sh("ip", "netns", "del", self.namespace(i), check=False)
            sh("ip", "link", "del", f"{self.tag}v{i}", check=False)
            shutil.rmtree(Path("/etc/netns") / self.namespace(i), ignore_errors=True)
        sh("ip", "link", "del", self.bridge, check=False)
        self.faults.clear()

    def exists(self) -> bool:
        listed = sh("ip", "netns", "list", check=False).stdout.split()
        return any(self.namespace(i) in listed for i in self.indexes)

    def run_in(self, node: int, *argv: str) -> subprocess.CompletedProcess[str]:
        return sh("ip", "netns", "exec", self.namespace(node), *argv)

    # ---- faults ---------------------------------------------------------------------------

    def drop_from(self, node: int, sources: Iterable[int | str]) -> None:
        """``node`` no longer hears ``sources`` (it may still reach them)."""
        for source in sources:
            self.run_in(node, "iptables", "-A", "INPUT", "-s", self.address(source), "-j", "DROP")

    def one_way(self, sender: int | str, receiver: int) -> None:
        """What ``sender`` sends never reaches ``receiver``; the other way still works."""
        self.drop_from(receiver, [sender])
        self.faults.append(f"{sender}->{receiver} dropped")

    def split(self, *sides: Sequence[int]) -> None:
        """No node hears a node of another side (clients in the root namespace reach all)."""
        for side in sides:
            others = [n for other in sides if other is not side for n in other]
            for node in side:
                self.drop_from(node, others)
        self.faults.append("|".join(",".join(map(str, side)) for side in sides))

    def isolate(self, node: int, *, from_clients: bool = False) -> None:
        """``node`` hears no other node (and, with ``from_clients``, not the services)."""
        sources: list[int | str] = [n for n in self.indexes if n != node]
        if from_clients:
            sources.append(ROOT)
        self.drop_from(node, sources)
        self.faults.append(f"{node} isolated")

    def lose(self, share: float) -> None:
        """Every node drops ``share`` of the packets it receives, at random."""
        for node in self.indexes:
            self.run_in(
                node, "iptables", "-A", "INPUT", "-m", "statistic", "--mode", "random",
                "--probability", f"{share:.3f}", "-j", "DROP",
            )  # fmt: skip
        self.faults.append(f"{share:.0%} loss")

    def heal(self) -> None:
        for node in self.indexes:
            self.run_in(node, "iptables", "-F", "INPUT")
            self.run_in(node, "iptables", "-F", "OUTPUT")
        self.faults.clear()
