"""All SQL of the operation aggregate. Rules come from ``durable_ops.model``.

Every state this module writes, and every attempt number, comes from a
``lifecycle`` decision: ``decide`` for the calls that read the row first, and
the fast-path constants (``CREATED``, ``CLAIMS``, ``COMPLETION``, ``REQUEUE``)
for the pre-built statements that do not.

Every function runs in a ``Tx`` (``durable_ops.storage.tx``): Core statements,
most of them built once at import, where an owner scope supplies
``SCOPE_OWNER`` and refuses a statement on this table that does not bind it.

Every mutation is a guarded UPDATE whose row count is checked: the WHERE
clause repeats the facts the decision was made on (state, attempt,
cancellation flag) and, for a lease holder, the lease token hash and a live
lease. A guard that no longer matches means somebody else moved first; owner
calls then re-read and decide again, lease holders learn they lost the lease.

The hot worker paths are written for the fewest statements: a heartbeat is
one UPDATE, a completion one UPDATE plus the attempt's UPDATE and the
notification INSERT, a claim one ``SELECT … FOR UPDATE SKIP LOCKED`` plus the
UPDATE of the row it locked and the attempt's INSERT, a create one INSERT and
the read of its key's tombstone.

Every write also tells ``db.on_unknown_commit`` how to recognise itself should
its COMMIT's connection be lost (ADR 0017): a create by the id it drew, a claim
by the hash of the lease token it drew, a heartbeat by the exact expiry it
wrote, a decision by the state, attempt and ``updated_at`` it wrote.

Every attempt is recorded in ``operation_attempts`` in the transaction of the
transition it belongs to: a claim inserts it (one INSERT), and the transition
that ends it (completion, failure, fallback, acknowledged cancel, the
sweeper's expiry or deadline) writes how it ended (one UPDATE by primary key,
derived from the lease token's hash). Heartbeats leave it alone. An attempt
row that is missing (claimed by an older release) is not an error: the end's
UPDATE then changes nothing, and the transition is recognised as before.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import secrets
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import Any, cast

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Row,
    RowMapping,
    Select,
    Table,
    Update,
    bindparam,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import ClassManager, configure_mappers
from sqlalchemy.orm.attributes import manager_of_class

from durable_ops.model import bounds, lifecycle
from durable_ops.model.errors import (
    CANCEL_REQUESTED,
    KEY_USED_FOR_ANOTHER_REQUEST,
    Conflict,
    DomainError,
    InvalidArgument,
    LeaseLost,
    NotFound,
)
from durable_ops.model.held_leases import HeldLease
from durable_ops.model.lifecycle import AttemptOutcome, Decision, Event, Facts
from durable_ops.model.retention import pruned
from durable_ops.model.routing import Route
from durable_ops.model.states import PENDING_STATES, OperationState, Privacy
from durable_ops.storage import notifications, retention
from durable_ops.storage.db import on_galera, on_unknown_commit
from durable_ops.storage.pages import Page, newest_first, page_size, paginate
from durable_ops.storage.per_row import per_row, row_ids
from durable_ops.storage.schema import ID_LENGTH, OperationAttempt, UserOperation
from durable_ops.storage.tx import SCOPE_OWNER, ScopeViolation, Tx

S = OperationState
OPS = cast(Table, UserOperation.__table__)
_OWNED = OPS.c.owner_user_id == SCOPE_OWNER
ATTEMPTS = cast(Table, OperationAttempt.__table__)
OWNER_RACE_ATTEMPTS = 5
SWEEP_BATCH = 200
# On Galera a claim takes one of the first CLAIM_SPREAD claimable rows of the top priority,
# at random: row locks do not reach other nodes, so claims through several nodes that all
# took the head of the queue would fail certification (1213) all but one (ADR 0017).
CLAIM_SPREAD = 8


@dataclass(frozen=True)
class CreateRequest:
    task_type: str
    idempotency_key: str
    subject_type: str
    subject_id: str
    priority: int = 0
    max_attempts: int = 3
    retry_delay_seconds: int = bounds.DEFAULT_RETRY_DELAY_SECONDS
    privacy: Privacy = Privacy.LOCAL_ONLY
    deadline_at: datetime | None = None
    time_budget_seconds: int | None = None
    context_ref: str = ""
    # The creating request's W3C traceparent (tracing on), so later spans can link to it.
    trace_parent: str = ""

    def validate(self, now: datetime) -> None:
        bounds.task_type(self.task_type)
        bounds.idempotency_key(self.idempotency_key)
        bounds.subject(self.subject_type, self.subject_id)
        bounds.text("context_ref", self.context_ref, bounds.SUBJECT_ID_MAX, required=False)
        bounds.trace_parent(self.trace_parent)
        bounds.int_range("priority", self.priority, bounds.PRIORITY_RANGE)
        bounds.int_range("max_attempts", self.max_attempts, bounds.MAX_ATTEMPTS_RANGE)
        bounds.int_range(
            "retry_delay_seconds", self.retry_delay_seconds, bounds.RETRY_DELAY_SECONDS_RANGE
        )
        if self.deadline_at is not None:
            bounds.deadline(self.deadline_at, now)

    def fingerprint(self) -> str:
        """What makes two creates "the same request". The deadline is left out:
        a repeated click computes a later absolute deadline for the same work, and
        its own trace."""
        fields = {name: getattr(self, name) for name in _FINGERPRINTED}
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


# What a fingerprint covers: every field of the request but these (asdict is slower).
_FINGERPRINTED = tuple(
    name
    for name in CreateRequest.__dataclass_fields__
    if name not in ("idempotency_key", "deadline_at", "trace_parent")
)


@dataclass(frozen=True)
class Claim:
    operation: UserOperation
    lease_token: str


@dataclass(frozen=True)
class Provenance:
    provider: str = ""
    model: str = ""
    route: str = ""

    def values(self) -> dict[str, str | None]:
        bounds.provenance(self.provider, self.model, self.route)
        return {
            "provider": self.provider or None,
            "model": self.model or None,
            "route": self.route or None,
        }


def new_id() -> str:
    return uuid.uuid4().hex


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def facts(op: UserOperation) -> Facts:
    return Facts(
        state=S(op.state),
        attempt=op.attempt,
        max_attempts=op.max_attempts,
        retry_delay_seconds=op.retry_delay_seconds,
        cancel_requested=op.cancel_requested,
        deadline_at=op.deadline_at,
        next_attempt_at=op.next_attempt_at,
        lease_expires_at=op.lease_expires_at,
    )


# ---- reading rows ---------------------------------------------------------------------------


@cache
def _operation_class() -> ClassManager[UserOperation]:
    configure_mappers()  # what the constructor's first call does, and new_instance does not
    return manager_of_class(UserOperation)


def detached(values: Mapping[Any, Any]) -> UserOperation:
    """A detached ``UserOperation`` holding ``values`` (column keys).

    Filled the way the ORM fills a loaded row, straight into the instance's
    dict: the constructor instead sets each of some thirty attributes through
    its instrumentation, which cost more than the INSERT of a create.
    """
    operation = _operation_class().new_instance()
    operation.__dict__.update(values)
    return operation


def _operation(row: Row[Any]) -> UserOperation:
    """A detached ``UserOperation`` holding one row's values."""
    return detached(row._mapping)


def _one(tx: Tx, statement: Select[Any], parameters: dict[str, Any]) -> UserOperation | None:
    row = tx.execute(statement, parameters).one_or_none()
    return None if row is None else _operation(row)


def _owned_scope(tx: Tx) -> list[ColumnElement[bool]]:
    """The owner criterion when ``tx`` is an owner scope; statements built per call use it."""
    return [] if tx.owner_id is None else [_OWNED]


def _row_is(tx: Tx, operation_id: str, columns: dict[str, Any]) -> bool:
    """Whether the operation exists with exactly these column values (a lost COMMIT's check)."""
    query = select(OPS.c.id).where(
        OPS.c.id == operation_id,
        *_owned_scope(tx),
        *(OPS.c[name] == value for name, value in columns.items()),
    )
    return tx.execute(query).first() is not None


def _recognised_by(operation_id: str, **columns: Any) -> None:
    """Should this transaction's COMMIT be lost: it committed iff the row reads like this."""
    on_unknown_commit(lambda tx: _row_is(tx, operation_id, columns))


# ---- owner reads and creates -------------------------------------------------------------

_GET = select(OPS).where(OPS.c.id == bindparam("operation_id"), _OWNED)
_BY_KEY = select(OPS).where(
    OPS.c.task_type == bindparam("task_type"),
    OPS.c.idempotency_key == bindparam("idempotency_key"),
    _OWNED,
)
_CREATE_COLUMNS = tuple(c.name for c in OPS.columns if c.name != "owner_user_id")
_CREATE_BINDS = {name: bindparam(name, type_=OPS.c[name].type) for name in _CREATE_COLUMNS}
# One statement: the row, unless the owner's key has a tombstone (its operation was pruned).
_INSERT = insert(OPS).from_select(
    ["owner_user_id", *_CREATE_COLUMNS],
    select(SCOPE_OWNER, *_CREATE_BINDS.values()).where(
        ~retention.tombstoned(_CREATE_BINDS["task_type"], _CREATE_BINDS["idempotency_key"])
    ),
)


def get(tx: Tx, operation_id: str) -> UserOperation:
    issuable = len(operation_id) <= bounds.ID_MAX  # a longer id was never issued
    op = _one(tx, _GET, {"operation_id": operation_id}) if issuable else None
    if op is None:
        raise NotFound("operation not found", code="operation_not_found")
    return op


def list_page(
    tx: Tx,
    *,
    size: int,
    token: str,
    state: OperationState | None = None,
    task_type: str = "",
) -> Page[UserOperation]:
    size = page_size(size)
    query: Select[Any] = select(OPS).where(_OWNED)
    if state is not None:
        query = query.where(OPS.c.state == state)
    if task_type:
        query = query.where(OPS.c.task_type == bounds.task_type(task_type))
    query = newest_first(query, OPS.c.created_at, OPS.c.id, token, size)
    rows = [_operation(row) for row in tx.execute(query)]
    return paginate(rows, size, lambda op: (op.created_at, op.id))


def create(tx: Tx, request: CreateRequest, now: datetime) -> tuple[UserOperation, bool]:
    """Insert the operation, or return the one this owner already made with this key.

    The INSERT goes first, and a new key (the common case) costs that statement
    alone: it inserts nothing when the key has a tombstone (a pruned key is
    refused, ADR 0021), and only then is the tombstone read. The unique index
    refuses a repeated key, and only then is the existing row read. A refused
    INSERT undoes only itself on both engines, so the transaction goes on.
    """
    if tx.owner_id is None:
        raise ScopeViolation("operations are created in their owner's scope")
    request.validate(now)
    fingerprint = request.fingerprint()
    created = lifecycle.CREATED
    values: dict[str, Any] = dict.fromkeys(_CREATE_COLUMNS)
    values.update(
        id=new_id(),
        task_type=request.task_type,
        idempotency_key=request.idempotency_key,
        request_hash=fingerprint,
        subject_type=request.subject_type,
        subject_id=request.subject_id,
        context_ref=request.context_ref or None,
        trace_parent=request.trace_parent or None,
        state=created.state,
        priority=request.priority,
        attempt=created.attempt,
        max_attempts=request.max_attempts,
        retry_delay_seconds=request.retry_delay_seconds,
        time_budget_seconds=request.time_budget_seconds,
        privacy=request.privacy,
        progress_percent=0,
        cancel_requested=created.cancel_requested,
        next_attempt_at=created.next_attempt_at,
        deadline_at=request.deadline_at,
        created_at=now,
        updated_at=now,
    )
    try:
        inserted = tx.write(_INSERT, values)
    except IntegrityError:
        # This owner used the key before (or a concurrent identical create won the race).
        existing = find_by_key(tx, request.task_type, request.idempotency_key)
        if existing is None:
            raise
        if not hmac.compare_digest(existing.request_hash, fingerprint):
            raise Conflict(KEY_USED_FOR_ANOTHER_REQUEST) from None
        return existing, False
    if not inserted:  # the key's operation finished long ago and was pruned
        tombstone = retention.tombstone_for(tx, request.task_type, request.idempotency_key)
        if tombstone is None:  # forgotten since the INSERT looked: the key is free again
            return create(tx, request, now)
        if not hmac.compare_digest(tombstone.request_hash, fingerprint):
            raise Conflict(KEY_USED_FOR_ANOTHER_REQUEST)
        raise pruned(tombstone.final_state, tombstone.finished_at)
    _recognised_by(values["id"])  # a fresh random id: only this INSERT wrote it
    return detached({**values, "owner_user_id": tx.owner_id}), True


def find_by_key(tx: Tx, task_type: str, idempotency_key: str) -> UserOperation | None:
    return _one(tx, _BY_KEY, {"task_type": task_type, "idempotency_key": idempotency_key})


_LATEST_FOR_SUBJECT = (
    select(OPS)
    .where(
        OPS.c.task_type == bindparam("task_type"),
        OPS.c.subject_type == bindparam("subject_type"),
        OPS.c.subject_id == bindparam("subject_id"),
        _OWNED,
    )
    .order_by(OPS.c.created_at.desc(), OPS.c.id.desc())
    .limit(1)
)
_ACTIVE_FOR_SUBJECT = _LATEST_FOR_SUBJECT.where(
    OPS.c.state.in_([state.value for state in (*PENDING_STATES, S.RUNNING)])
)


def active_for_subject(
    tx: Tx, task_type: str, subject_type: str, subject_id: str
) -> UserOperation | None:
    subject = {"task_type": task_type, "subject_type": subject_type, "subject_id": subject_id}
    return _one(tx, _ACTIVE_FOR_SUBJECT, subject)


def latest_for_subject(
    tx: Tx, task_type: str, subject_type: str, subject_id: str
) -> UserOperation | None:
    subject = {"task_type": task_type, "subject_type": subject_type, "subject_id": subject_id}
    return _one(tx, _LATEST_FOR_SUBJECT, subject)


# ---- owner mutations -----------------------------------------------------------------------


def cancel(tx: Tx, operation_id: str, now: datetime) -> UserOperation:
    return _owner_event(tx, operation_id, Event.CANCEL, now)


def retry(tx: Tx, operation_id: str, now: datetime) -> UserOperation:
    return _owner_event(tx, operation_id, Event.RETRY, now)


def _owner_event(tx: Tx, operation_id: str, event: Event, now: datetime) -> UserOperation:
    for _ in range(OWNER_RACE_ATTEMPTS):
        op = get(tx, operation_id)
        decision = lifecycle.decide(facts(op), event, now)
        if not decision.changed:
            return op
        if _apply(tx, op, decision, now, event):
            return get(tx, operation_id)
        # a worker or the sweeper moved first: decide again on fresh facts
    raise LeaseLost("the operation kept changing; try again", code="contention")


# ---- the worker's lease ------------------------------------------------------------------

_CLAIMABLE = (
    OPS.c.state == bindparam("from_state"),
    OPS.c.task_type.in_(bindparam("task_types", expanding=True)),
    (OPS.c.deadline_at.is_(None)) | (OPS.c.deadline_at > bindparam("now")),
)
_CLAIM_CANDIDATE = (
    select(OPS)
    .where(*_CLAIMABLE)
    .order_by(OPS.c.priority.desc(), OPS.c.created_at)
    .limit(1)
    .with_for_update(skip_locked=True)
)
# Galera: the head of the queue without locks, then one of its top-priority rows at random.
_CLAIM_HEAD = (
    select(OPS.c.id, OPS.c.priority)
    .where(*_CLAIMABLE)
    .order_by(OPS.c.priority.desc(), OPS.c.created_at)
    .limit(CLAIM_SPREAD)
)
_CLAIM_PICK = (
    select(OPS)
    .where(
        OPS.c.id == bindparam("claim_id"),
        OPS.c.state == bindparam("from_state"),
        (OPS.c.deadline_at.is_(None)) | (OPS.c.deadline_at > bindparam("now")),
    )
    .with_for_update(skip_locked=True)
)
_CLAIMED_COLUMNS = (
    "state",
    "attempt",
    "lease_token_hash",
    "lease_expires_at",
    "started_at",
    "updated_at",
    "next_attempt_at",
)
_CLAIM_TAKE = (
    update(OPS)
    .where(OPS.c.id == bindparam("claim_id"), OPS.c.state == bindparam("from_state"))
    .values({column: bindparam(column) for column in _CLAIMED_COLUMNS})
)


def claim(
    tx: Tx,
    task_types: Sequence[str],
    lease_seconds: int,
    now: datetime,
    *,
    external_route: bool = False,
) -> Claim | None:
    """Lock the best claimable row, skipping rows other claims hold, then take its lease.

    Two statements: ``SELECT … ORDER BY priority DESC, created_at LIMIT 1 FOR UPDATE
    SKIP LOCKED`` walks the claim index and reads the whole row, and a guarded UPDATE
    by id writes the lease. Concurrent claimers take different rows instead of
    queueing on the head of the queue. (SQLite has no row locks: its writers hold
    the database lock from ``BEGIN IMMEDIATE``, so the same two statements are safe.)
    A third, the INSERT of the attempt's history row, keyed by the new lease.
    """
    if tx.owner_id is not None:
        raise ScopeViolation("the claim runs in the neutral scope")
    if not task_types:
        return None
    for task_type in task_types:
        bounds.task_type(task_type)
    expires = lifecycle.lease_expiry(now, lease_seconds)
    move = lifecycle.CLAIMS[Event.CLAIM_EXTERNAL if external_route else Event.CLAIM]
    candidate = {"from_state": move.source, "task_types": list(task_types), "now": now}
    if _spreads(tx):
        row = _spread_candidate(tx, candidate)
    else:
        row = tx.execute(_CLAIM_CANDIDATE, candidate).one_or_none()
    if row is None:
        return None
    found = row._mapping
    token = secrets.token_urlsafe(32)  # 256 random bits; only the hash is stored
    values = _claimed_values(found, move, hash_token(token), expires, now)
    taken = tx.execute(_CLAIM_TAKE, {**values, "claim_id": found["id"], "from_state": move.source})
    if taken.rowcount != 1:
        return None  # unreachable while the row is locked; never hand out a lost row
    _recognised_by(found["id"], lease_token_hash=values["lease_token_hash"])
    tx.execute(_ATTEMPT_STARTS, _attempt_start(found, values, external_route, now))
    return Claim(detached({**found, **values}), token)


def _claimed_values(
    found: RowMapping,
    move: lifecycle.Transition,
    token_hash: str,
    expires: datetime,
    now: datetime,
) -> dict[str, Any]:
    """The columns a claim writes on the row it took."""
    return {
        "state": move.target,
        "attempt": move.attempt_after(found["attempt"]),
        "lease_token_hash": token_hash,
        "lease_expires_at": expires,
        "started_at": found["started_at"] or now,
        "updated_at": now,
        "next_attempt_at": None,
    }


def _attempt_start(
    found: RowMapping, values: Mapping[str, Any], external_route: bool, now: datetime
) -> dict[str, Any]:
    """The attempt row a claim inserts, keyed by its lease."""
    return {
        "id": attempt_id(values["lease_token_hash"]),
        "operation_id": found["id"],
        "owner_user_id": found["owner_user_id"],
        "attempt": values["attempt"],
        "route": Route.EXTERNAL if external_route else Route.LOCAL,
        "started_at": now,
        "lease_expires_at": values["lease_expires_at"],
    }


_CLAIM_CANDIDATES = _CLAIM_CANDIDATE.limit(bindparam("limit"))
CLAIM_BATCH_MAX = 100


@cache
def _claim_take_many(count: int, starts_attempt: bool) -> Update:
    """One UPDATE for ``count`` locked rows: each gets its own token hash (``CASE id``),
    the rest is the same for all. Built once per batch size."""
    ids = row_ids("id", count)
    token_hash = per_row(OPS.c.id, ids, "hash")
    return (
        update(OPS)
        .where(OPS.c.id.in_(ids), OPS.c.state == bindparam("from_state"))
        .values(
            state=bindparam("to_state"),
            attempt=OPS.c.attempt + 1 if starts_attempt else OPS.c.attempt,
            lease_token_hash=token_hash,
            lease_expires_at=bindparam("expires"),
            started_at=func.coalesce(OPS.c.started_at, bindparam("now")),
            updated_at=bindparam("now"),
            next_attempt_at=None,
        )
    )


def claim_many(
    tx: Tx,
    task_types: Sequence[str],
    lease_seconds: int,
    now: datetime,
    limit: int,
    *,
    external_route: bool = False,
) -> list[Claim]:
    """Up to ``limit`` claims in one transaction, each with its own lease token.

    Three statements for the whole batch: ``SELECT … LIMIT n FOR UPDATE SKIP
    LOCKED``, one UPDATE of the rows it locked, one multi-row INSERT of their
    attempts. On Galera, where claims spread over the head of the queue, the
    batch is ``limit`` single claims in the one transaction.
    """
    if tx.owner_id is not None:
        raise ScopeViolation("the claim runs in the neutral scope")
    bounds.int_range("max_operations", limit, (1, CLAIM_BATCH_MAX))
    if limit == 1 or _spreads(tx):
        claims: list[Claim] = []
        while len(claims) < limit:
            one = claim(tx, task_types, lease_seconds, now, external_route=external_route)
            if one is None:
                break
            claims.append(one)
        return claims
    if not task_types:
        return []
    for task_type in task_types:
        bounds.task_type(task_type)
    expires = lifecycle.lease_expiry(now, lease_seconds)
    move = lifecycle.CLAIMS[Event.CLAIM_EXTERNAL if external_route else Event.CLAIM]
    candidate = {"from_state": move.source, "task_types": list(task_types), "now": now}
    rows = tx.execute(_CLAIM_CANDIDATES, {**candidate, "limit": limit}).all()
    if not rows:
        return []
    tokens = [secrets.token_urlsafe(32) for _ in rows]  # 256 random bits each
    hashes = [hash_token(token) for token in tokens]
    parameters: dict[str, Any] = {
        "from_state": move.source,
        "to_state": move.target,
        "expires": expires,
        "now": now,
    }
    for n, (row, token_hash) in enumerate(zip(rows, hashes, strict=True)):
        parameters[f"id_{n}"] = row.id
        parameters[f"hash_{n}"] = token_hash
    taken = tx.write(_claim_take_many(len(rows), move.starts_attempt), parameters)
    if taken != len(rows):  # unreachable while the rows are locked
        raise RuntimeError(f"claimed {taken} of the {len(rows)} rows locked")
    _recognised_by(rows[0].id, lease_token_hash=hashes[0])
    claims = []
    attempts: list[dict[str, Any]] = []
    for row, token, token_hash in zip(rows, tokens, hashes, strict=True):
        found = row._mapping
        values = _claimed_values(found, move, token_hash, expires, now)
        claims.append(Claim(detached({**found, **values}), token))
        attempts.append(_attempt_start(found, values, external_route, now))
    tx.execute_many(_ATTEMPT_STARTS, attempts)
    return claims


def _spreads(tx: Tx) -> bool:
    """Whether claims spread over the head of the queue: on Galera (tests may force it)."""
    return on_galera(tx.connection)


def _spread_candidate(tx: Tx, candidate: dict[str, Any]) -> Row[Any] | None:
    """Lock one of the first ``CLAIM_SPREAD`` claimable rows of the top priority, at random.

    The ordering promise becomes: never a lower priority while a higher one is
    claimable, and within a priority one of the oldest few (not the oldest).
    When every row of the head is locked here, the head query as on one server.
    """
    head = tx.execute(_CLAIM_HEAD, candidate).all()
    if not head:
        return None
    ids = [row.id for row in head if row.priority == head[0].priority]
    random.shuffle(ids)
    for claim_id in ids:
        row = tx.execute(_CLAIM_PICK, {**candidate, "claim_id": claim_id}).one_or_none()
        if row is not None:
            return row
    return tx.execute(_CLAIM_CANDIDATE, candidate).one_or_none()


_LIVE_LEASE = (
    OPS.c.id == bindparam("operation_id"),
    OPS.c.state == S.RUNNING,
    OPS.c.lease_token_hash == bindparam("token_hash"),
    OPS.c.lease_expires_at > bindparam("now"),
    _OWNED,
)
_EXTEND = (
    update(OPS)
    .where(*_LIVE_LEASE)
    .values(lease_expires_at=bindparam("expires"), updated_at=bindparam("now"))
)
_EXTEND_WITH_PROGRESS = _EXTEND.values(progress_percent=bindparam("progress"))
# The common heartbeat: no cancellation pending, so the reply needs no read.
_HEARTBEAT = _EXTEND.where(OPS.c.cancel_requested.is_(False))
_HEARTBEAT_WITH_PROGRESS = _EXTEND_WITH_PROGRESS.where(OPS.c.cancel_requested.is_(False))
_COMPLETED_COLUMNS = (
    "state",
    "progress_percent",
    "finished_at",
    "updated_at",
    "lease_expires_at",
    "result_ref",
    "provider",
    "model",
    "route",
)
_COMPLETE = (
    update(OPS)
    .where(*_LIVE_LEASE)
    .values({column: bindparam(column) for column in _COMPLETED_COLUMNS})
)


def heartbeat(
    tx: Tx,
    operation_id: str,
    token: str,
    lease_seconds: int,
    progress: int | None,
    now: datetime,
) -> tuple[datetime, bool]:
    """Extend a live lease; answer (new expiry, cancellation requested)."""
    if progress is not None:
        bounds.int_range("progress_percent", progress, bounds.PROGRESS_RANGE)
    expires = lifecycle.lease_expiry(now, lease_seconds)
    token_hash = hash_token(token)
    lease = {
        "operation_id": operation_id,
        "token_hash": token_hash,
        "now": now,
        "expires": expires,
        "progress": progress,
    }
    _recognised_by(operation_id, lease_token_hash=token_hash, lease_expires_at=expires)
    fast = _HEARTBEAT if progress is None else _HEARTBEAT_WITH_PROGRESS
    if tx.execute(fast, lease).rowcount == 1:
        return expires, False
    # Rare path: cancellation was requested, or the lease is not ours any more.
    op = _lease_holder(tx, operation_id, token_hash)
    lifecycle.decide(facts(op), Event.HEARTBEAT, now)  # raises LeaseLost when it is gone
    extend = _EXTEND if progress is None else _EXTEND_WITH_PROGRESS
    if tx.execute(extend, lease).rowcount != 1:
        raise LeaseLost("the lease was lost while extending it")
    return expires, op.cancel_requested


def _still_held(ids: list[BindParameter[str]]) -> tuple[ColumnElement[bool], ...]:
    """The rows whose leases are live and still the named ones: each row by its own id,
    owner and token hash (``CASE id``), running, its lease not run out at ``now``."""
    return (
        OPS.c.id.in_(ids),
        OPS.c.state == S.RUNNING,
        OPS.c.lease_expires_at > bindparam("now"),
        OPS.c.lease_token_hash == per_row(OPS.c.id, ids, "token_hash"),
        OPS.c.owner_user_id == per_row(OPS.c.id, ids, "owner"),
    )


# One beat of a worker's lease stream: at most this many rows per UPDATE (and per read).
BEAT_ROWS_MAX = 100


@cache
def _extend_many(count: int, *, unless_cancelled: bool) -> Update:
    """One UPDATE extending ``count`` live leases of any owners: each row guarded on its own
    id, owner and token hash (``CASE id``), given its own expiry and, when the beat carries
    one, its own progress. Built once per size."""
    ids = row_ids("id", count)

    def own(name: str, type_: Any = None) -> ColumnElement[Any]:
        return per_row(OPS.c.id, ids, name, type_)

    statement = (
        update(OPS)
        .where(*_still_held(ids))
        .values(
            lease_expires_at=own("expires", OPS.c.lease_expires_at.type),
            progress_percent=func.coalesce(
                own("progress", OPS.c.progress_percent.type), OPS.c.progress_percent
            ),
            updated_at=bindparam("now"),
        )
    )
    # The common beat: no cancellation pending, so the answer needs no read.
    return statement.where(OPS.c.cancel_requested.is_(False)) if unless_cancelled else statement


_LEASES_OF = (
    select(
        OPS.c.id,
        OPS.c.owner_user_id,
        OPS.c.lease_token_hash,
        *(OPS.c[name] for name in Facts.__dataclass_fields__),
    )
    .where(OPS.c.id.in_(bindparam("ids", expanding=True)))
    .with_for_update()
)

Held = tuple[datetime, bool]  # a held lease's new expiry, and whether its owner asked to cancel


def heartbeat_many(tx: Tx, leases: Sequence[HeldLease], now: datetime) -> list[Held | DomainError]:
    """Extend many live leases of many owners; answer each one alone, in order.

    One guarded UPDATE for up to ``BEAT_ROWS_MAX`` leases, each row by its own
    id, owner and token hash (a token extends only the operation it was claimed
    for, of the owner it was claimed for) and, in the common beat, no cancel
    pending. When fewer rows matched: one read of the rows, locked, says for
    each lease why (``decide``, as the single ``heartbeat``), and one more
    UPDATE extends the leases still held whose owner asked to cancel.
    """
    if tx.owner_id is not None:
        raise ScopeViolation("a lease stream's beat runs in the neutral scope")
    answers: list[Held | DomainError] = []
    for start in range(0, len(leases), BEAT_ROWS_MAX):
        answers += _beat(tx, leases[start : start + BEAT_ROWS_MAX], now)
    return answers


def _beat_parameters(leases: Sequence[HeldLease], now: datetime) -> dict[str, Any]:
    parameters: dict[str, Any] = {"now": now}
    for n, lease in enumerate(leases):
        parameters.update(
            {
                f"id_{n}": lease.operation_id,
                f"owner_{n}": lease.owner_id,
                f"token_hash_{n}": hash_token(lease.token),
                f"expires_{n}": lifecycle.lease_expiry(now, lease.lease_seconds),
                f"progress_{n}": lease.progress,
            }
        )
    return parameters


def _beat(tx: Tx, leases: Sequence[HeldLease], now: datetime) -> list[Held | DomainError]:
    parameters = _beat_parameters(leases, now)
    expiries = [parameters[f"expires_{n}"] for n in range(len(leases))]
    extended = tx.execute(_extend_many(len(leases), unless_cancelled=True), parameters).rowcount
    if extended == len(leases):
        first = leases[0]
        _recognised_by(
            first.operation_id,
            lease_token_hash=parameters["token_hash_0"],
            lease_expires_at=expiries[0],
        )
        return [(expires, False) for expires in expiries]
    # Rare path: a cancel is pending, or some leases are not this worker's any more.
    rows = {
        row.id: row for row in tx.execute(_LEASES_OF, {"ids": [x.operation_id for x in leases]})
    }
    answers: list[Held | DomainError] = []
    cancelled: list[int] = []
    for n, lease in enumerate(leases):
        try:
            row = _held_row(rows.get(lease.operation_id), lease, parameters[f"token_hash_{n}"])
            lifecycle.decide(_row_facts(row), Event.HEARTBEAT, now)  # LeaseLost when it is gone
        except DomainError as refused:
            answers.append(refused)
            continue
        if row.lease_expires_at != expiries[n]:  # held, but not extended by the beat above
            cancelled.append(n)
        answers.append((expiries[n], bool(row.cancel_requested)))
    if cancelled:
        again = [leases[n] for n in cancelled]
        statement = _extend_many(len(again), unless_cancelled=False)
        if tx.execute(statement, _beat_parameters(again, now)).rowcount != len(again):
            raise RuntimeError("a lease read held and locked was not extended")  # unreachable
    held = [n for n, answer in enumerate(answers) if not isinstance(answer, DomainError)]
    if held:
        _recognised_by(
            leases[held[0]].operation_id,
            lease_token_hash=parameters[f"token_hash_{held[0]}"],
            lease_expires_at=expiries[held[0]],
        )
    return answers


def _held_row(row: Row[Any] | None, lease: HeldLease, token_hash: str) -> Row[Any]:
    """The lease's row when it is the named owner's and carries its token."""
    if row is None or row.owner_user_id != lease.owner_id:  # another owner's: not found
        raise NotFound("operation not found", code="operation_not_found")
    if row.lease_token_hash is None or not hmac.compare_digest(row.lease_token_hash, token_hash):
        raise LeaseLost("the lease token does not match this operation's lease")
    return row


def _row_facts(row: Row[Any]) -> Facts:
    values = {name: row._mapping[name] for name in Facts.__dataclass_fields__}
    return Facts(**{**values, "state": S(row.state)})


_LOCK_LEASE = (
    select(
        OPS.c.state,
        OPS.c.lease_token_hash,
        OPS.c.lease_expires_at,
        OPS.c.cancel_requested,
        OPS.c.task_type,
        OPS.c.subject_type,
        OPS.c.subject_id,
    )
    .where(OPS.c.id == bindparam("operation_id"), _OWNED)
    .with_for_update()
)


def hold_for_publish(
    tx: Tx, operation_id: str, token: str, now: datetime, *, kind: str, subject: tuple[str, str]
) -> None:
    """Lock the operation row; pass only while ``token`` holds its live lease and no cancel waits.

    Runs in the transaction that writes the attempt's result, so a cancel or
    a takeover commits either before (and the result is refused) or after
    (and finds the result published). Cancel wins until then. The operation
    must be the scope owner's: another owner's answers exactly like a missing
    one (NOT_FOUND ``operation_not_found``), before any lease is looked at.
    """
    issuable = len(operation_id) <= bounds.ID_MAX  # a longer id was never issued
    row = (
        tx.execute(_LOCK_LEASE, {"operation_id": operation_id}).one_or_none()
        if issuable and operation_id
        else None
    )
    if row is None:
        raise NotFound("operation not found", code="operation_not_found")
    held = (
        row.state == S.RUNNING
        and row.lease_token_hash is not None
        and hmac.compare_digest(row.lease_token_hash, hash_token(token))
        and row.lease_expires_at is not None
        and row.lease_expires_at > now
    )
    if not held:
        raise LeaseLost("the lease is not live: the result belongs to another attempt")
    if row.cancel_requested:
        raise LeaseLost("the owner cancelled the operation", code=CANCEL_REQUESTED)
    # The result is the operation's own: of its kind, about its subject.
    if kind != row.task_type:
        raise InvalidArgument("kind", "is not the operation's task type")
    if subject != (row.subject_type, row.subject_id):
        raise InvalidArgument("subject_id", "is not the operation's subject")


def complete(
    tx: Tx,
    operation_id: str,
    token: str,
    provenance: Provenance,
    result_ref: str,
    now: datetime,
) -> OperationState:
    bounds.text("result_ref", result_ref, bounds.SUBJECT_ID_MAX, required=False)
    token_hash = hash_token(token)
    move = lifecycle.COMPLETION
    values = {
        "state": move.target,
        "progress_percent": bounds.PROGRESS_RANGE[1],
        "finished_at": now,
        "updated_at": now,
        "lease_expires_at": None,
        "result_ref": result_ref or None,
        **provenance.values(),
    }
    lease = {"operation_id": operation_id, "token_hash": token_hash, "now": now}
    if tx.execute(_COMPLETE, {**lease, **values}).rowcount == 1:
        _recognised_by(operation_id, lease_token_hash=token_hash, state=move.target)
        _end_attempt(
            tx,
            token_hash,
            AttemptOutcome.SUCCEEDED,
            now,
            {"provider": values["provider"], "model": values["model"]},
        )
        if move.notify:
            notifications.insert_for_operation(tx, operation_id, move.target, now)
        return move.target
    op = _lease_holder(tx, operation_id, token_hash)
    decision = lifecycle.decide(facts(op), Event.COMPLETE, now)  # a duplicate, or LeaseLost
    return decision.state


def fail(
    tx: Tx,
    operation_id: str,
    token: str,
    *,
    retryable: bool,
    failure_code: str,
    failure_message: str,
    provenance: Provenance,
    now: datetime,
) -> OperationState:
    bounds.failure(failure_code, failure_message)
    event = Event.FAIL_RETRYABLE if retryable else Event.FAIL_PERMANENT
    extra = {
        "failure_code": failure_code,
        "failure_message": failure_message or None,
        **provenance.values(),
    }
    return _lease_event(tx, operation_id, token, event, now, extra)


def request_fallback(
    tx: Tx, operation_id: str, token: str, provenance: Provenance, now: datetime
) -> OperationState:
    return _lease_event(tx, operation_id, token, Event.REQUEST_FALLBACK, now, provenance.values())


def acknowledge_cancel(tx: Tx, operation_id: str, token: str, now: datetime) -> OperationState:
    return _lease_event(tx, operation_id, token, Event.ACKNOWLEDGE_CANCEL, now, {})


LeaseMutation = Callable[[Tx], OperationState]
SETTLE_BATCH_MAX = 100


def settle_many(
    tx: Tx, mutations: Sequence[tuple[str, LeaseMutation]]
) -> list[OperationState | DomainError]:
    """Lease mutations of many owners in one transaction, each in its owner's scope.

    ``mutations`` pairs an owner with a mutation (``complete``, ``fail`` with its
    arguments bound). A refused one (a lost lease, a bad field) is answered
    alone with its error and the rest commit: every lease mutation refuses
    before its first write (its guarded UPDATE), so a refusal leaves nothing
    in the shared transaction.
    """
    if tx.owner_id is not None:
        raise ScopeViolation("a batch of lease mutations runs in the neutral scope")
    bounds.int_range("items", len(mutations), (1, SETTLE_BATCH_MAX))
    answers: list[OperationState | DomainError] = []
    for owner_id, mutation in mutations:
        try:
            answers.append(mutation(Tx(tx.connection, bounds.owner_id(owner_id))))
        except DomainError as refused:
            answers.append(refused)
    return answers


@dataclass(frozen=True)
class Completion:
    """One item of a batch of completions: the lease, and the owner it was claimed for."""

    owner_id: str
    operation_id: str
    token: str
    provenance: Provenance
    result_ref: str = ""


@cache
def _complete_many(count: int) -> Update:
    """One UPDATE completing ``count`` live leases of any owners: each row guarded on its
    own token hash and owner (``CASE id``), each given its own result and provenance."""
    ids = row_ids("id", count)

    def own(name: str) -> ColumnElement[Any]:
        return per_row(OPS.c.id, ids, name)

    return (
        update(OPS)
        .where(*_still_held(ids))
        .values(
            state=lifecycle.COMPLETION.target,
            progress_percent=bounds.PROGRESS_RANGE[1],
            finished_at=bindparam("now"),
            updated_at=bindparam("now"),
            lease_expires_at=None,
            result_ref=own("result_ref"),
            provider=own("provider"),
            model=own("model"),
            route=own("route"),
        )
    )


@cache
def _end_attempts_many(count: int) -> Update:
    ids = row_ids("attempt_id", count)
    return (
        update(ATTEMPTS)
        .where(ATTEMPTS.c.id.in_(ids), ATTEMPTS.c.ended_at.is_(None))
        .values(
            ended_at=bindparam("now"),
            outcome=AttemptOutcome.SUCCEEDED,
            provider=per_row(ATTEMPTS.c.id, ids, "provider"),
            model=per_row(ATTEMPTS.c.id, ids, "model"),
        )
    )


_LIVE_LEASES_OF = (
    select(OPS.c.id, OPS.c.owner_user_id, OPS.c.lease_token_hash)
    .where(
        OPS.c.id.in_(bindparam("ids", expanding=True)),
        OPS.c.state == S.RUNNING,
        OPS.c.lease_expires_at > bindparam("now"),
    )
    .with_for_update()
)


def _live(tx: Tx, completions: Sequence[Completion], now: datetime) -> list[Completion]:
    """The completions whose lease is live, with their own token and owner; locked."""
    rows = tx.execute(
        _LIVE_LEASES_OF, {"ids": [item.operation_id for item in completions], "now": now}
    )
    holders = {row.id: (row.owner_user_id, row.lease_token_hash) for row in rows}
    return [
        item
        for item in completions
        if holders.get(item.operation_id) == (item.owner_id, hash_token(item.token))
    ]


def _complete_live(tx: Tx, live: Sequence[Completion], now: datetime) -> None:
    """Complete leases read live and locked: their operations, attempts and notifications,
    one statement each."""
    provenance = {item.operation_id: item.provenance.values() for item in live}
    parameters: dict[str, Any] = {"now": now}
    ending: dict[str, Any] = {"now": now}
    for k, item in enumerate(live):
        token_hash = hash_token(item.token)
        recorded = provenance[item.operation_id]
        parameters.update({f"{key}_{k}": value for key, value in recorded.items()})
        parameters.update(
            {
                f"id_{k}": item.operation_id,
                f"token_hash_{k}": token_hash,
                f"owner_{k}": item.owner_id,
                f"result_ref_{k}": item.result_ref or None,
            }
        )
        ending[f"attempt_id_{k}"] = attempt_id(token_hash)
        ending[f"provider_{k}"] = recorded["provider"]
        ending[f"model_{k}"] = recorded["model"]
    updated = tx.write(_complete_many(len(live)), parameters)
    if updated != len(live):  # unreachable while the rows are locked
        raise RuntimeError(f"completed {updated} of the {len(live)} live leases locked")
    first = live[0]
    _recognised_by(
        first.operation_id,
        lease_token_hash=hash_token(first.token),
        state=lifecycle.COMPLETION.target,
    )
    tx.write(_end_attempts_many(len(live)), ending)
    notifications.insert_for_operations(
        tx, [item.operation_id for item in live], lifecycle.COMPLETION.target, now
    )


def complete_many(
    tx: Tx, completions: Sequence[Completion], now: datetime
) -> list[OperationState | DomainError]:
    """Many completions of many owners in one transaction, answered per item.

    Four statements for every live lease of the batch: a ``SELECT … FOR UPDATE``
    of the named operations that finds which leases are live (own token, own
    owner), then one UPDATE of those operations, one of their attempts and one
    INSERT of their notifications. The others (a lost lease, an exact repeat,
    an operation named twice) go one by one through ``complete`` in their
    owner's scope, as ``settle_many`` does, and a refused one is answered alone.
    """
    if tx.owner_id is not None:
        raise ScopeViolation("a batch of lease mutations runs in the neutral scope")
    bounds.int_range("items", len(completions), (1, SETTLE_BATCH_MAX))
    answers: list[OperationState | DomainError | None] = [None] * len(completions)
    fast: list[int] = []
    seen: set[str] = set()
    for n, item in enumerate(completions):
        try:
            bounds.owner_id(item.owner_id)
            bounds.text("result_ref", item.result_ref, bounds.SUBJECT_ID_MAX, required=False)
            item.provenance.values()
        except DomainError as refused:
            answers[n] = refused
            continue
        if item.operation_id not in seen:
            seen.add(item.operation_id)
            fast.append(n)
    # One item is cheaper on the single completion's path (three statements, no lock read).
    live = _live(tx, [completions[n] for n in fast], now) if len(fast) > 1 else []
    if live:
        _complete_live(tx, live, now)
    completed = {item.operation_id for item in live}
    for n in fast:
        if completions[n].operation_id in completed:
            answers[n] = lifecycle.COMPLETION.target
    for n, item in enumerate(completions):
        if answers[n] is not None:
            continue
        try:
            answers[n] = complete(
                Tx(tx.connection, item.owner_id),
                item.operation_id,
                item.token,
                item.provenance,
                item.result_ref,
                now,
            )
        except DomainError as refused:
            answers[n] = refused
    return [answer for answer in answers if answer is not None]


def _lease_event(
    tx: Tx,
    operation_id: str,
    token: str,
    event: Event,
    now: datetime,
    extra: dict[str, Any],
) -> OperationState:
    op = _lease_holder(tx, operation_id, hash_token(token))
    decision = lifecycle.decide(facts(op), event, now)
    if decision.changed and not _apply(tx, op, decision, now, event, extra, lease=True):
        raise LeaseLost("the lease was lost before the update")
    return decision.state


def _lease_holder(tx: Tx, operation_id: str, token_hash: str) -> UserOperation:
    op = get(tx, operation_id)
    if op.lease_token_hash is None or not hmac.compare_digest(op.lease_token_hash, token_hash):
        raise LeaseLost("the lease token does not match this operation's lease")
    return op


# ---- attempt history ------------------------------------------------------------------------

_STARTING = ("id", "operation_id", "owner_user_id", "attempt", "route", "started_at")
_ATTEMPT_STARTS = insert(ATTEMPTS).values(
    {name: bindparam(name) for name in (*_STARTING, "lease_expires_at")}
)
_ENDING = ("ended_at", "outcome", "failure_code", "failure_message", "provider", "model")


def _attempt_ends(*, owned: bool, expiry: bool) -> Update:
    columns = _ENDING + (("lease_expires_at",) if expiry else ())
    guard = [ATTEMPTS.c.id == bindparam("attempt_id"), ATTEMPTS.c.ended_at.is_(None)]
    if owned:
        guard.append(ATTEMPTS.c.owner_user_id == SCOPE_OWNER)
    return update(ATTEMPTS).where(*guard).values({name: bindparam(name) for name in columns})


# (owner scope, writes the final lease expiry) -> the prebuilt UPDATE ending an attempt
_ATTEMPT_ENDS = {
    (owned, expiry): _attempt_ends(owned=owned, expiry=expiry)
    for owned in (False, True)
    for expiry in (False, True)
}
_ATTEMPTS_OF = (
    select(ATTEMPTS)
    .where(
        ATTEMPTS.c.operation_id == bindparam("operation_id"),
        ATTEMPTS.c.owner_user_id == SCOPE_OWNER,
    )
    .order_by(ATTEMPTS.c.started_at, ATTEMPTS.c.id)
)


def attempt_id(token_hash: str) -> str:
    """The attempt row's key, derived one way from its lease token's hash: an end finds
    its row by primary key, and the key tells nothing of the token or its hash."""
    return hashlib.sha256(f"attempt:{token_hash}".encode()).hexdigest()[:ID_LENGTH]


def _end_attempt(
    tx: Tx, token_hash: str, outcome: AttemptOutcome, now: datetime, values: dict[str, Any]
) -> None:
    """Write how the attempt holding this lease ended, in the transition's transaction."""
    ending = dict.fromkeys(_ENDING)
    ending.update(values, ended_at=now, outcome=outcome, attempt_id=attempt_id(token_hash))
    statement = _ATTEMPT_ENDS[(tx.owner_id is not None, "lease_expires_at" in ending)]
    tx.execute(statement, ending)


def attempts(tx: Tx, operation_id: str) -> list[OperationAttempt]:
    """The scope owner's record of an operation's attempts, oldest first (another owner's: none)."""
    rows = tx.execute(_ATTEMPTS_OF, {"operation_id": operation_id})
    return [OperationAttempt(**row._mapping) for row in rows]


# ---- the live lease channel (neutral scope) ------------------------------------------------

LIVE_QUERY_IDS_MAX = 1000  # ids per IN list; a replica holding more streams asks in parts
_CANCELS_AMONG = select(OPS.c.id).where(
    OPS.c.id.in_(bindparam("ids", expanding=True)),
    OPS.c.state == S.RUNNING,
    OPS.c.cancel_requested.is_(True),
)
_VERSIONS_AMONG = select(OPS.c.id, OPS.c.state, OPS.c.updated_at).where(
    OPS.c.id.in_(bindparam("ids", expanding=True))
)
_CLAIMABLE_KINDS = (
    select(OPS.c.state, OPS.c.task_type)
    .where(
        OPS.c.state.in_([move.source.value for move in lifecycle.CLAIMS.values()]),
        (OPS.c.deadline_at.is_(None)) | (OPS.c.deadline_at > bindparam("now")),
    )
    .distinct()
)


def cancels_among(tx: Tx, operation_ids: Sequence[str]) -> set[str]:
    """Which of these running operations' owners asked to cancel: one primary-key lookup."""
    return _among(tx, _CANCELS_AMONG, operation_ids, "the cancel watch")


@dataclass(frozen=True)
class Version:
    """What a waiter compares: is the operation done, and is it still the one it saw."""

    state: OperationState
    updated_at: datetime


def versions_among(tx: Tx, operation_ids: Sequence[str]) -> dict[str, Version]:
    """State and ``updated_at`` of those of these operations that exist: one primary-key lookup."""
    return {
        row.id: Version(OperationState(row.state), row.updated_at)
        for row in _rows_among(tx, _VERSIONS_AMONG, operation_ids, "the operation watch")
    }


def _among(tx: Tx, query: Select[Any], operation_ids: Sequence[str], who: str) -> set[str]:
    """The ids ``query`` keeps."""
    return {row[0] for row in _rows_among(tx, query, operation_ids, who)}


def _rows_among(
    tx: Tx, query: Select[Any], operation_ids: Sequence[str], who: str
) -> list[Row[Any]]:
    """The rows ``query`` keeps, asked in chunks a statement can carry."""
    if tx.owner_id is not None:
        raise ScopeViolation(f"{who} runs in the neutral scope")
    found: list[Row[Any]] = []
    for start in range(0, len(operation_ids), LIVE_QUERY_IDS_MAX):
        ids = list(operation_ids[start : start + LIVE_QUERY_IDS_MAX])
        found.extend(tx.execute(query, {"ids": ids}))
    return found


def claimable_kinds(tx: Tx, now: datetime) -> set[tuple[str, str]]:
    """(state, task type) of every kind of operation a claim could take now.

    Walks the claim index by state; waiting claims ask this once per poll for
    all of them, and only the claims that match try to claim.
    """
    if tx.owner_id is not None:
        raise ScopeViolation("the claim poll runs in the neutral scope")
    return {(row.state, row.task_type) for row in tx.execute(_CLAIMABLE_KINDS, {"now": now})}


# ---- the sweeper (neutral scope) ---------------------------------------------------------

_EXPIRED_LEASES = (
    select(OPS)
    .where(OPS.c.state == S.RUNNING, OPS.c.lease_expires_at <= bindparam("now"))
    .limit(SWEEP_BATCH)
)
_PAST_DEADLINE = (
    select(OPS)
    .where(
        OPS.c.state.in_([state.value for state in PENDING_STATES]),
        OPS.c.deadline_at <= bindparam("now"),
    )
    .limit(SWEEP_BATCH)
)
_PROMOTE_DUE_RETRIES = (
    update(OPS)
    .where(
        OPS.c.state == lifecycle.REQUEUE.source,
        OPS.c.next_attempt_at <= bindparam("now"),
        # A retry due after its deadline is failed above, never requeued.
        (OPS.c.deadline_at.is_(None)) | (OPS.c.deadline_at > bindparam("now")),
    )
    # The attempt is not written: REQUEUE does not start one (a test ties the two).
    .values(state=lifecycle.REQUEUE.target, next_attempt_at=None, updated_at=bindparam("now"))
)


@dataclass
class SweepReport:
    expired_leases: int = 0
    deadlines: int = 0
    promoted: int = 0

    @property
    def total(self) -> int:
        return self.expired_leases + self.deadlines + self.promoted


def sweep(tx: Tx, now: datetime) -> SweepReport:
    """Expire leases, fail passed deadlines closed, make due retries claimable."""
    if tx.owner_id is not None:
        raise ScopeViolation("the sweeper runs in the neutral scope")
    report = SweepReport()
    for row in tx.execute(_EXPIRED_LEASES, {"now": now}).all():
        op = _operation(row)
        decision = lifecycle.decide(facts(op), Event.SWEEP, now)
        report.expired_leases += _apply(tx, op, decision, now, Event.SWEEP)
    for row in tx.execute(_PAST_DEADLINE, {"now": now}).all():
        op = _operation(row)
        decision = lifecycle.decide(facts(op), Event.SWEEP, now)
        report.deadlines += _apply(tx, op, decision, now, Event.SWEEP)
    report.promoted = tx.execute(_PROMOTE_DUE_RETRIES, {"now": now}).rowcount
    return report


# ---- applying a decision -------------------------------------------------------------------


def _apply(
    tx: Tx,
    op: UserOperation,
    decision: Decision,
    now: datetime,
    event: Event,
    extra: dict[str, Any] | None = None,
    *,
    lease: bool = False,
) -> bool:
    """Write ``decision`` if ``op`` still is what it was decided on; True when written."""
    values: dict[str, Any] = {
        "state": decision.state,
        "attempt": decision.attempt,
        "cancel_requested": decision.cancel_requested,
        "next_attempt_at": decision.next_attempt_at,
        "updated_at": now,
        **(extra or {}),
    }
    if decision.failure_code is not None:
        values["failure_code"] = decision.failure_code
    if decision.state is not S.RUNNING:
        values["lease_expires_at"] = None
    if decision.terminal:
        values["finished_at"] = now
    if event is Event.RETRY:
        values.update(_fresh_start(op, now))
    guard = [
        OPS.c.id == op.id,
        OPS.c.state == op.state,
        OPS.c.attempt == op.attempt,
        OPS.c.cancel_requested.is_(op.cancel_requested),
        *_owned_scope(tx),
    ]
    if lease:
        guard += [
            OPS.c.state == S.RUNNING,
            OPS.c.lease_token_hash == (op.lease_token_hash or ""),
            OPS.c.lease_expires_at > now,
        ]
    elif op.state == S.RUNNING:
        guard.append(OPS.c.lease_token_hash == op.lease_token_hash)
    if tx.execute(update(OPS).where(*guard).values(**values)).rowcount != 1:
        return False
    _recognised_by(op.id, state=decision.state, attempt=decision.attempt, updated_at=now)
    outcome = lifecycle.attempt_outcome(S(op.state), event, decision)
    if outcome is not None and op.lease_token_hash is not None:
        ending = {name: values.get(name) for name in ("failure_message", "provider", "model")}
        ending["failure_code"] = values.get("failure_code")
        ending["lease_expires_at"] = op.lease_expires_at
        _end_attempt(tx, op.lease_token_hash, outcome, now, ending)
    if decision.remove_notification:
        notifications.delete_for_operation(tx, op.id)
    if decision.notify:
        notifications.insert_for_operation(tx, op.id, decision.state, now)
    return True


def _fresh_start(op: UserOperation, now: datetime) -> dict[str, Any]:
    """A manual retry: a new attempt budget and, when the task has one, a new deadline."""
    budget = op.time_budget_seconds
    return {
        "progress_percent": 0,
        "lease_token_hash": None,
        "lease_expires_at": None,
        "started_at": None,
        "finished_at": None,
        "failure_code": None,
        "failure_message": None,
        "result_ref": None,
        "deadline_at": now + timedelta(seconds=budget) if budget else op.deadline_at,
    }


__all__ = [
    "Claim",
    "CreateRequest",
    "Provenance",
    "SweepReport",
    "acknowledge_cancel",
    "active_for_subject",
    "attempt_id",
    "attempts",
    "cancel",
    "cancels_among",
    "claim",
    "claimable_kinds",
    "complete",
    "create",
    "fail",
    "find_by_key",
    "get",
    "heartbeat",
    "heartbeat_many",
    "hold_for_publish",
    "latest_for_subject",
    "list_page",
    "request_fallback",
    "retry",
    "sweep",
]
