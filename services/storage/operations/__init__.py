"""The operation aggregate's SQL, one module per transition. Rules come from ``durable_ops.model``.

Each transition has one writer, batched, guarded and recognisable after a
lost COMMIT (ADR 0017):

- ``creation.create``: a new operation (one INSERT, deduplicated by key);
- ``claims.claim``: leases on the best claimable rows (Galera's spread is a parameter);
- ``leases.extend``: every beat of a lease, single or streamed, with or without progress;
- ``apply.write``: every transition ``lifecycle.decide`` makes, reached through
  ``settlement.settle`` (complete, fail, fallback, acknowledged cancel),
  ``owner`` (cancel, retry) and ``sweeps.sweep`` (expiries, deadlines);
- ``sweeps.sweep`` also requeues due retries, the one transition with no row read;
- ``history``: the attempt rows those writers start and end.

Every function runs in a ``Tx`` (``durable_ops.storage.tx``); the shared
vocabulary (the lease and deadline guards, recognition) is ``rows``.
"""

from durable_ops.storage.operations.claims import CLAIM_BATCH_MAX, CLAIM_SPREAD, Claim, claim
from durable_ops.storage.operations.creation import CreateRequest, create
from durable_ops.storage.operations.leases import (
    Held,
    extend,
    heartbeat,
    held_references,
    hold_for_publish,
)
from durable_ops.storage.operations.owner import cancel, retry
from durable_ops.storage.operations.reads import (
    Version,
    active_for_subject,
    attempts,
    claimable_kinds,
    find_by_key,
    get,
    latest_for_subject,
    list_page,
    versions_among,
)
from durable_ops.storage.operations.rows import (
    attempt_id,
    detached,
    each_active_state,
    facts,
    hash_token,
    in_line,
    new_id,
)
from durable_ops.storage.operations.settlement import Provenance, Settlement, settle, settle_one
from durable_ops.storage.operations.sweeps import SweepReport, sweep

__all__ = [
    "CLAIM_BATCH_MAX",
    "CLAIM_SPREAD",
    "Claim",
    "CreateRequest",
    "Held",
    "Provenance",
    "Settlement",
    "SweepReport",
    "Version",
    "active_for_subject",
    "attempt_id",
    "attempts",
    "cancel",
    "claim",
    "claimable_kinds",
    "create",
    "detached",
    "each_active_state",
    "extend",
    "facts",
    "find_by_key",
    "get",
    "hash_token",
    "heartbeat",
    "held_references",
    "hold_for_publish",
    "in_line",
    "latest_for_subject",
    "list_page",
    "new_id",
    "retry",
    "settle",
    "settle_one",
    "sweep",
    "versions_among",
]
