"""The fault schedules of ``scripts/jepsen.sh``, short, in the suite (issue 40).

One network of namespaces, one three-node Galera cluster and one product for
the module (``run.harness``: all of it removed afterwards, whatever happened);
then each schedule runs about 10 s of load with one fault, heals, drains and is
checked from its recorded history and the final rows. Every count the product
promises must be 0. The full run (60 s of load per schedule, rounds of faults)
is ``scripts/jepsen.sh --full``. Without root or galera-4 the tests skip, unless
``OPS_REQUIRE_GALERA=1`` makes that a failure.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.partition.cluster import unavailable
from tests.partition.run import SCHEDULES, Harness, Timing, harness, run_schedule
from tests.support.figures import report

pytestmark = [pytest.mark.galera, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Harness]:
    reason = unavailable()
    if reason is not None:
        if os.environ.get("OPS_REQUIRE_GALERA") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    # Its own names and subnet: a scripts/jepsen.sh run at the same time is left alone.
    with harness(tag="djt", prefix="10.77.1") as made:
        yield made
    assert not made.network.exists()


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_the_promises_hold_under_the_schedule(cluster: Harness, name: str, tmp_path: Path) -> None:
    result = run_schedule(cluster, SCHEDULES[name], Timing.short(), out=tmp_path)
    report(f"\n{result.line()}")
    assert result.faults >= 1
    assert result.outcomes.get("ok", 0) > 0  # the load ran
    zeros = dict.fromkeys(result.counts.as_dict(), 0)
    assert result.counts.as_dict() == zeros, f"{result.line()}; history and rows in {tmp_path}"
