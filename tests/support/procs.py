"""What a test sees of processes through /proc: a process's children, whether one lives."""

from __future__ import annotations

from pathlib import Path


def children(pid: int) -> set[int]:
    """The pids of ``pid``'s children, of every thread of it."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        found.update(int(child) for child in (task / "children").read_text().split())
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"
