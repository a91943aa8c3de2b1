"""The benchmarks' command line answers ``--help``, and their arithmetic is right.

Benchmarks are never run as tests; this only pins the entry point and the
helpers every figure is computed with.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import machine
from benchmarks.context import Context
from benchmarks.stats import Paired, interleave, median, percentile, ratio
from benchmarks.table import Row, Target, render_text

ROOT = Path(__file__).resolve().parents[2]


def test_help_lists_the_modes() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "--quick" in done.stdout
    assert "--only" in done.stdout


def test_median_and_percentiles() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5
    values = [float(v) for v in range(1, 11)]  # 1..10
    assert percentile(values, 0) == 1.0
    assert percentile(values, 50) == 5.5
    assert percentile(values, 100) == 10.0
    assert percentile(values, 95) == pytest.approx(9.55)
    assert percentile([7.0], 95) == 7.0
    with pytest.raises(ValueError, match="nothing"):
        median([])


def test_ratios_are_medians_of_paired_rounds() -> None:
    assert ratio(3.0, 2.0) == 1.5
    assert math.isinf(ratio(1.0, 0.0))
    paired = Paired(subject=(10.0, 30.0, 20.0), baseline=(20.0, 30.0, 10.0))
    assert paired.ratios == (0.5, 1.0, 2.0)
    assert paired.ratio == 1.0
    assert paired.subject_median == 20.0
    assert paired.baseline_median == 20.0


def test_interleave_alternates_which_side_goes_first() -> None:
    calls: list[str] = []

    def side(name: str, value: float) -> float:
        calls.append(name)
        return value

    paired = interleave(4, lambda: side("s", 2.0), lambda: side("b", 4.0))
    assert calls == ["s", "b", "b", "s", "s", "b", "b", "s"]
    assert paired.ratio == 0.5


def test_targets_and_table() -> None:
    assert Target(">=", 0.5).met(0.5)
    assert not Target(">=", 0.5).met(0.49)
    assert Target("<=", 1.5).met(1.2)
    assert not Target("<=", 1.5).met(math.nan)
    row = Row("1", "lifecycles/s", "100/s", "200/s", 0.5, Target(">=", 0.5))
    assert row.verdict == "MET"
    text = render_text(["header"], [row])
    assert "lifecycles/s" in text
    assert "MET" in text


def test_every_section_can_be_chosen() -> None:
    from benchmarks.__main__ import SECTIONS, parse

    assert sorted(SECTIONS, key=int) == [str(number) for number in range(1, 16)]
    assert parse(["--only", "15"]).only == ["15"]
    with pytest.raises(SystemExit):
        parse(["--only", "16"])


def test_the_soak_runs_only_when_named_and_for_its_minutes() -> None:
    from benchmarks.__main__ import OPT_IN, parse

    assert frozenset({"15"}) == OPT_IN  # a plain or full run leaves the 30-minute soak out
    assert parse(["--only", "15", "--minutes", "10"]).minutes == 10
    assert parse(["--nightly"]).nightly
    with pytest.raises(SystemExit):
        parse(["--minutes", "0"])


def test_absolute_figures_show_their_unit_and_ratios_none() -> None:
    latency = Row("8", "cancel p95", "20 cancels", "", 0.31, Target("<=", 1.0), unit="s")
    rate = Row("8", "statements/s", "6.9/s", "3.0/s", 3.9, Target("<=", 5.0), unit="/s")
    ratio_row = Row("1", "lifecycles/s", "100/s", "200/s", 0.5, Target(">=", 0.5))
    text = render_text([], [latency, rate, ratio_row])
    for shown in ("0.31 s", "<= 1 s", "3.90/s", "<= 5/s"):
        assert shown in text
    line = next(line for line in text.splitlines() if line.startswith("1 "))
    assert " ".join(line.split()).endswith("200/s 0.50 >= 0.5 MET")
    assert latency.verdict == rate.verdict == "MET"


PROC_STAT = """
cpu  1000 10 300 8000 50 0 40 600 0 0
cpu0 500 5 150 4000 25 0 20 300 0 0
intr 12345
"""


def test_cpu_steal_is_the_hypervisors_share_of_the_time_between_readings() -> None:
    before = machine.parse_cpu_times(PROC_STAT)
    assert before == machine.CpuTimes(total=1000 + 10 + 300 + 8000 + 50 + 40 + 600, steal=600)
    after = machine.CpuTimes(total=before.total + 200, steal=before.steal + 50)
    assert machine.steal_share(before, after) == 0.25
    assert machine.steal_share(before, before) == 0.0  # no time passed: none stolen
    with pytest.raises(ValueError, match="cpu line"):
        machine.parse_cpu_times("intr 1\n")


def test_each_section_records_the_steal_it_ran_under() -> None:
    ctx = Context(quick=True)
    ctx.begin_section("1 first")
    ctx.begin_section("2 second")  # closes the first
    ctx.end_section()
    ctx.end_section()  # nothing open: no change
    assert list(ctx.steal) == ["1 first", "2 second"]
    assert all(0.0 <= share <= 1.0 for share in ctx.steal.values())
