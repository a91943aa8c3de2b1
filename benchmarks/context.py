"""What every section gets: the mode, the round count, a logger and the load guard."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from benchmarks import machine

MIN_ROUNDS = 3


@dataclass
class Context:
    quick: bool
    rounds: int = MIN_ROUNDS
    # Seconds a full-mode section waits for the load to fall below machine.QUIET_LOAD.
    quiet_wait: float = 120.0
    # Minutes of load of section 15, the soak (``--minutes``).
    soak_minutes: int = 30
    loads: dict[str, float] = field(default_factory=dict)
    # The hypervisor's share of the CPUs while each section ran (machine.steal_share).
    steal: dict[str, float] = field(default_factory=dict)
    _open: tuple[str, machine.CpuTimes] | None = field(default=None, init=False, repr=False)

    def say(self, message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    def begin_section(self, name: str) -> float:
        """Log the section; in full mode wait (bounded) for a quiet machine. The load."""
        self.end_section()
        wait = 0.0 if self.quick else self.quiet_wait
        load = machine.wait_for_quiet(wait, say=self.say)
        self.loads[name] = load
        self.say(f"== {name} (load {load:.2f})")
        started = machine.cpu_times()
        self._open = None if started is None else (name, started)
        return load

    def end_section(self) -> None:
        """Close the running section, if any: record the CPU steal it ran under."""
        if self._open is None:
            return
        (name, started), self._open = self._open, None
        ended = machine.cpu_times()
        if ended is not None:
            self.steal[name] = machine.steal_share(started, ended)

    def pick(self, quick: int, full: int) -> int:
        return quick if self.quick else full
