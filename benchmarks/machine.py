"""What the figures ran on, and waiting for a quiet machine before a section."""

from __future__ import annotations

import os
import platform
import sys
import time
from collections.abc import Callable

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
