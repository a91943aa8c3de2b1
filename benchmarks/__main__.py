"""``python -m benchmarks [--quick] [--only N ...] [--nightly] [--minutes M]``: measure, print.

Every figure of sections 1-7 is a ratio of a subject to its baseline measured
in the same run, interleaved, the median of at least three rounds; sections 8,
9 and 12 give absolute latencies and query rates against absolute targets. Sections:

1 end-to-end throughput (gRPC services vs raw SQL, MariaDB and SQLite)
2 statements per operation (counted, not timed)
3 listing at scale (10k vs 1M rows; 10k vs 100k with --quick)
4 gateway overhead (HTTP gateway vs direct gRPC)
5 against a peer (procrastinate on PostgreSQL)
6 heartbeat cost (200 live leases vs none)
7 host store (advance vs a raw durable write)
8 live lease channel (cancel and pickup latency with two replicas, cancel poll cost)
9 google.longrunning WaitOperation (complete-to-done latency, 100 waiters' query cost)
10 Galera (lifecycles/s through three nodes vs one, 1213 replays per 1,000 claims)
11 lease stream (one beat of N leases on one stream vs N single streams, ADR 26)
12 live events (token → /api/events latency, draft writes/s, 1,000 idle streams' CPU)
13 PROD-003 local-model concurrency (worker concurrency x llama-server slots, ADR 44)
14 fair shares (one owner's backlog against four others' pickups, ADR 49)
15 soak (``--minutes`` of steady mixed load: RSS, fds, p99 drift, connections a minute);
   run only when named (``--only 15``) or with ``--nightly`` (every section and the soak)

A full run (without ``--quick``) waits for a quiet machine before each section
and writes its table into ``benchmarks/RESULTS.md`` (``--no-results`` to skip).
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import structlog

from benchmarks import (
    fairness,
    galera,
    gateway,
    heartbeats,
    hoststore,
    lease_channel,
    lease_stream,
    listing,
    live_events,
    long_running,
    machine,
    peer,
    prod003,
    soak,
    statements,
    throughput,
)
from benchmarks.context import MIN_ROUNDS, Context
from benchmarks.table import Row, Target, render_markdown, render_text

SECTIONS: dict[str, Callable[[Context], list[Row]]] = {
    "2": statements.run,
    "1": throughput.run,
    "6": heartbeats.run,
    "3": listing.run,
    "4": gateway.run,
    "5": peer.run,
    "7": hoststore.run,
    "8": lease_channel.run,
    "9": long_running.run,
    "10": galera.run,
    "11": lease_stream.run,
    "12": live_events.run,
    "13": prod003.run,
    "14": fairness.run,
    "15": soak.run,
}
# Sections a plain run leaves out: the soak takes its --minutes (30 by default).
OPT_IN = frozenset({"15"})
RESULTS = Path(__file__).with_name("RESULTS.md")
BEGIN_MARK = "<!-- full-run:begin -->"
END_MARK = "<!-- full-run:end -->"


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Measure durable-ops against its baselines; every figure is a ratio.",
    )
    parser.add_argument(
        "--quick", action="store_true", help="smaller sizes and rounds (under 3 minutes)"
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=sorted(SECTIONS),
        metavar="N",
        help="run only these sections (1-15)",
    )
    parser.add_argument(
        "--nightly",
        action="store_true",
        help="every section, the soak (15) included: the nightly or by-hand run",
    )
    parser.add_argument(
        "--minutes",
        type=int,
        default=None,
        help="minutes of load of the soak, section 15 (default 30; 3 with --quick)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=MIN_ROUNDS,
        help=f"interleaved rounds per figure (at least {MIN_ROUNDS})",
    )
    parser.add_argument(
        "--no-wait", action="store_true", help="do not wait for a quiet machine (full mode)"
    )
    parser.add_argument(
        "--no-results", action="store_true", help="do not write benchmarks/RESULTS.md"
    )
    args = parser.parse_args(argv)
    if args.rounds < MIN_ROUNDS:
        parser.error(f"--rounds must be at least {MIN_ROUNDS}")
    if args.minutes is not None and args.minutes < 1:
        parser.error("--minutes must be at least 1")
    return args


def _quiet_logs() -> None:
    """The in-process servers log like the product; the benchmark's output is the table."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    logging.getLogger().setLevel(logging.WARNING)


def _commit() -> str:
    try:
        found = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent,
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return found.stdout.strip()


def header(ctx: Context, started: datetime, seconds: float) -> list[str]:
    loads = ", ".join(f"{name.split()[0]}: {load:.2f}" for name, load in ctx.loads.items())
    steal = ", ".join(f"{name.split()[0]}: {share:.0%}" for name, share in ctx.steal.items())
    return [
        f"durable-ops benchmarks, {'quick' if ctx.quick else 'full'} mode,"
        f" {started:%Y-%m-%d %H:%M} UTC, commit {_commit()}, {seconds:.0f} s",
        f"machine: {machine.describe()}",
        f"load (1-min average at each section's start): {loads}",
        *([f"CPU steal (the hypervisor's share while each section ran): {steal}"] if steal else []),
        f"figures: ratio subject ÷ baseline, median of {ctx.rounds} interleaved rounds",
    ]


def write_results(lines: list[str], rows: list[Row]) -> None:
    block = "\n".join(
        [BEGIN_MARK, "", *(f"    {line}" for line in lines), "", render_markdown(rows), END_MARK]
    )
    text = (
        RESULTS.read_text()
        if RESULTS.exists()
        else f"# Benchmark results\n\n{BEGIN_MARK}\n{END_MARK}\n"
    )
    if BEGIN_MARK in text and END_MARK in text:
        before, _, rest = text.partition(BEGIN_MARK)
        _, _, after = rest.partition(END_MARK)
        text = before + block + after
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    RESULTS.write_text(text)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    _quiet_logs()
    minutes = args.minutes if args.minutes is not None else (3 if args.quick else 30)
    ctx = Context(
        quick=args.quick,
        rounds=args.rounds,
        quiet_wait=0.0 if args.no_wait else 120.0,
        soak_minutes=minutes,
    )
    started, clock = datetime.now(UTC), time.perf_counter()
    chosen = [
        name
        for name in SECTIONS
        if (name in args.only if args.only else args.nightly or name not in OPT_IN)
    ]
    rows: list[Row] = []
    failed = False
    for name in chosen:
        try:
            rows += SECTIONS[name](ctx)
        except Exception as exc:  # one broken section must not hide the others' figures
            failed = True
            traceback.print_exc()
            rows.append(
                Row(name, f"section {name} failed: {exc!r}"[:110], "", "", 0.0, Target("==", 1))
            )
    ctx.end_section()
    rows.sort(key=lambda row: row.section)
    lines = header(ctx, started, time.perf_counter() - clock)
    absolute = sorted({row.section for row in rows if row.unit})
    if absolute:
        lines.append(
            f"section{'s' if len(absolute) > 1 else ''} {', '.join(absolute)}: absolute figures"
            " (latency, statements/s) against absolute targets"
        )
    print(render_text(lines, rows))
    if not args.quick and not args.no_results and not args.only:
        write_results(lines, rows)
        print(f"wrote {RESULTS}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
