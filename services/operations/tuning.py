"""The Operations server's timing: values no operator needs to set (ADR 0034).

Each has a default that holds on every deployment we know of, and what it
buys is said beside it. A process uses the defaults; a test that needs a
faster sweep or poll builds its own ``Tuning``. What an operator does set
(addresses, the database, secrets, retention days, limits) is in
``durable_ops.settings``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Tuning:
    claim_poll_interval_seconds: float = 0.05
    """While claims wait, how often a replica asks the database for claimable work (one
    query for all of them): work created through another replica is picked up within it
    (figure 8: create → claimed p50 ≤ 50 ms). A replica's own creates wake a claim at once."""

    watch_interval_seconds: float = 0.1
    """While calls wait on operations (``WaitOperation``, HTTP long-polls, open lease
    streams), how often a replica asks for what changed elsewhere (one query for all):
    figure 9 (complete → done p95 ≤ 250 ms). Lease streams' cancels are asked every third
    tick (``watch.CANCEL``: figure 8's statements per second)."""

    sweep_interval_seconds: float = 1.0
    """How often the sweeper looks for expired leases, passed deadlines, due retries and
    scheduled operations now due (ADR 0050: they start at most this long after their
    ``not_before``); leases are 5 s at the least, so a second is fine-grained enough."""

    retention_interval_seconds: float = 3600.0
    """How often the periodic prune runs (when ``OPS_RETENTION_DAYS`` is set); retention
    counts days."""

    prune_pause_seconds: float = 0.1
    """The periodic prune's rest between two full batches, so the work it shares the
    database with goes first."""

    metrics_cache_seconds: float = 2.0
    """How long the gauges read from the database at scrape time are reused, so that
    several scrapers cost one read."""

    fair_shares: bool = True
    """Whether a create takes its owner's turn within its priority (ADR 0049), so one
    owner's backlog does not delay another's next operation (the benchmark's "fairness"
    section: the other owners' pickup p95 at most twice the idle one). Off only for that
    section's comparison run: first due, first out, and one SELECT less per create."""

    def __post_init__(self) -> None:
        for each in fields(self):  # zero would spin; none of them means "off"
            if each.type != "bool" and not getattr(self, each.name) > 0:  # also NaN
                raise ValueError(f"Tuning.{each.name} must be greater than 0")


TUNING = Tuning()
