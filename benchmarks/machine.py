"""What the figures ran on, and waiting for a quiet machine before a section."""

from __future__ import annotations

import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

QUIET_LOAD = 1.5


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as source:
            for line in source:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def memory_gib() -> float:
    try:
        with open("/proc/meminfo", encoding="utf-8") as source:
            for line in source:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    return 0.0


def load() -> float:
    """The one-minute load average."""
    return os.getloadavg()[0]


@dataclass(frozen=True)
class CpuTimes:
    """All CPUs' time since boot, in clock ticks: in total, and stolen by the hypervisor."""

    total: int
    steal: int


def parse_cpu_times(proc_stat: str) -> CpuTimes:
    """The aggregate ``cpu`` line of ``/proc/stat``: user nice system idle iowait irq
    softirq steal (guest time is counted within user already, so it is left out)."""
    for line in proc_stat.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            ticks = [int(value) for value in fields[1:9]]
            return CpuTimes(total=sum(ticks), steal=ticks[7] if len(ticks) > 7 else 0)
    raise ValueError("no aggregate cpu line in /proc/stat")


def cpu_times() -> CpuTimes | None:
    """Now, or None where there is no ``/proc/stat``."""
    try:
        with open("/proc/stat", encoding="ascii") as source:
            return parse_cpu_times(source.read())
    except (OSError, ValueError):
        return None


def steal_share(before: CpuTimes, after: CpuTimes) -> float:
    """The share of the CPUs' time the hypervisor took between two readings (0 to 1).

    On a shared VM this is time a CPU had work to run and the hypervisor ran a
    neighbour's instead: a section run with a large share measured them too.
    """
    elapsed = after.total - before.total
    return (after.steal - before.steal) / elapsed if elapsed > 0 else 0.0


def describe() -> str:
    return (
        f"{platform.system()} {platform.release()}, {os.cpu_count()} cores ({cpu_model()}),"
        f" {memory_gib():.0f} GiB, Python {sys.version.split()[0]}"
    )


def wait_for_quiet(
    max_wait: float, *, say: Callable[[str], None] = print, threshold: float = QUIET_LOAD
) -> float:
    """Wait up to ``max_wait`` seconds for the load to fall to ``threshold``; return the load."""
    deadline = time.monotonic() + max_wait
    current = load()
    if current > threshold and max_wait > 0:
        say(f"  load {current:.2f} > {threshold}: waiting up to {max_wait:.0f} s for it to fall")
    while current > threshold and time.monotonic() < deadline:
        time.sleep(5)
        current = load()
    return current
