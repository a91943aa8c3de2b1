"""A test's figures (a drill's counts, a fuzz's requests), listed at the end of the run.

``report`` prints one line with a prefix; ``tests/conftest.py`` collects such
lines from the captured output of every test and prints them in a "figures"
section of the summary, so a run that passes still shows them.
"""

from __future__ import annotations

PREFIX = "[figures] "


def report(text: str) -> None:
    print(PREFIX + " ".join(text.split()))


def figures_in(captured: str) -> list[str]:
    return [line[len(PREFIX) :] for line in captured.splitlines() if line.startswith(PREFIX)]
