"""A stateful property test of begin/advance/get/compact/forget against a plain model.

The machine runs a real session on a real directory and reopens it at random, so
the model is checked against what survives a close and reacquire too. Compaction
changes nothing in the model (no answer changes); forgetting removes the
compacted ids from it.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from datetime import timedelta

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from durable_ops.hoststore import (
    ForbiddenTransition,
    HostStoreError,
    PlanHashConflict,
    Record,
    RevisionMismatch,
    Session,
    State,
    Tombstone,
    UnknownOperation,
    UnresolvedOperation,
    acquire,
)

IDS = st.sampled_from(["op-a", "op-b", "op-c", "op-d"])
HASHES = st.sampled_from(["hash-1", "hash-2"])
STATES = st.sampled_from(list(State))

# The model's own copy of the seed's table, independent of durable_ops.hoststore.transitions.
MOVES = {
    "queued": {"running", "cancelled"},
    "running": {"succeeded", "failed_recovered", "needs_attention", "unknown"},
    "needs_attention": {"succeeded", "failed_recovered"},
    "unknown": {"succeeded", "failed_recovered"},
}


@dataclass
class Modelled:
    plan_hash: str
    state: str
    revision: int


class HostStoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = tempfile.mkdtemp(prefix="hoststore-machine-")
        self.session: Session = acquire(self.directory, "runner-1")
        self.model: dict[str, Modelled] = {}
        self.buried: set[str] = set()  # the ids the store holds as tombstones

    def teardown(self) -> None:
        self.session.close()
        shutil.rmtree(self.directory)

    def _expect(self, error: type[HostStoreError] | None, call: object) -> object:
        assert callable(call)
        if error is None:
            return call()
        with pytest.raises(error):
            call()
        return None

    @rule(operation_id=IDS, plan_hash=HASHES)
    def begin(self, operation_id: str, plan_hash: str) -> None:
        existing = self.model.get(operation_id)
        unresolved = [m for m in self.model.values() if m.state in MOVES]
        if existing is not None and existing.plan_hash != plan_hash:
            self._expect(PlanHashConflict, lambda: self.session.begin(operation_id, plan_hash))
        elif existing is None and unresolved:
            self._expect(UnresolvedOperation, lambda: self.session.begin(operation_id, plan_hash))
        else:
            record, created = self.session.begin(operation_id, plan_hash)
            assert created is (existing is None)
            if existing is None:
                self.model[operation_id] = Modelled(plan_hash, "queued", 1)
            modelled = self.model[operation_id]
            assert (record.plan_hash, record.state.value, record.revision) == (
                modelled.plan_hash,
                modelled.state,
                modelled.revision,
            )

    @rule(operation_id=IDS, revision=st.integers(1, 5), next_state=STATES)
    def advance(self, operation_id: str, revision: int, next_state: State) -> None:
        self._advance(operation_id, revision, next_state)

    @precondition(lambda self: any(m.state in MOVES for m in self.model.values()))
    @rule(data=st.data())
    def advance_validly(self, data: st.DataObject) -> None:
        operation_id = next(key for key, m in self.model.items() if m.state in MOVES)
        modelled = self.model[operation_id]
        target = data.draw(st.sampled_from(sorted(MOVES[modelled.state])))
        self._advance(operation_id, modelled.revision, State(target))

    def _advance(self, operation_id: str, revision: int, target: State) -> None:
        modelled = self.model.get(operation_id)
        if modelled is None:
            error: type[HostStoreError] | None = UnknownOperation
        elif modelled.revision != revision:
            error = RevisionMismatch
        elif target.value not in MOVES.get(modelled.state, set()):
            error = ForbiddenTransition
        else:
            error = None
        outcome = self._expect(error, lambda: self.session.advance(operation_id, revision, target))
        if error is None:
            assert modelled is not None
            modelled.state, modelled.revision = target.value, revision + 1
            assert outcome == self.session.get(operation_id)

    @rule(operation_id=IDS)
    def get(self, operation_id: str) -> None:
        if operation_id not in self.model:
            self._expect(UnknownOperation, lambda: self.session.get(operation_id))
            return
        record = self.session.get(operation_id)
        modelled = self.model[operation_id]
        assert (record.state.value, record.revision) == (modelled.state, modelled.revision)

    @rule()
    def compact(self) -> None:
        terminal = {key for key, m in self.model.items() if m.state not in MOVES}
        assert self.session.compact(older_than=timedelta(0)) == len(terminal - self.buried)
        self.buried = terminal

    @rule()
    def forget(self) -> None:
        assert self.session.forget(older_than=timedelta(0)) == len(self.buried)
        for key in self.buried:
            del self.model[key]
        self.buried = set()

    @rule()
    def reopen(self) -> None:
        self.session.close()
        self.session = acquire(self.directory, "runner-1")

    @invariant()
    def store_matches_the_model(self) -> None:
        held: list[Record | Tombstone] = [*self.session.records(), *self.session.tombstones()]
        seen = {r.id: Modelled(r.plan_hash, r.state.value, r.revision) for r in held}
        assert seen == self.model
        assert {t.id for t in self.session.tombstones()} == self.buried
        unresolved = self.session.unresolved()
        expected = [key for key, m in self.model.items() if m.state in MOVES]
        assert ([unresolved.id] if unresolved else []) == expected


HostStoreMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=40, deadline=None
)
test_host_store_against_the_model = HostStoreMachine.TestCase
