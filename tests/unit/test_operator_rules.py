"""The operator scope's pure parts (ADR 19): ages, filters, names, the scope, who reaches it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import cast

import jwt
import pytest
from sqlalchemy.engine import Connection

from durable_ops.model import bounds, console
from durable_ops.model.errors import InvalidArgument, PermissionDenied
from durable_ops.model.operator import NAME_MAX, OperatorFilter, operator_name, parse_duration
from durable_ops.model.scope import (
    NeutralScope,
    OperatorScope,
    OwnerScope,
    Role,
    Scope,
    require_neutral_worker,
    require_operator,
    require_owner,
)
from durable_ops.model.states import OperationState
from durable_ops.rpc.credentials import mint_service_token, verify_service_token
from durable_ops.settings import Settings
from durable_ops.storage import console as console_store
from durable_ops.storage import operator as store
from durable_ops.storage import task_pauses
from durable_ops.storage.tx import OperatorTx, ScopeViolation, Tx
from tests.support.keys import keys_dir, signing_key, trusted
from tests.unit.test_architecture import SERVICES, _reach

NO_CONNECTION = cast(Connection, None)  # every check below refuses before any SQL


# ---- --older-than ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("30m", 1800),
        ("2h", 7200),
        ("7d", 7 * 86400),
        ("1w", 7 * 86400),
        ("1d12h", 36 * 3600),
        ("3660d", 3660 * 86400),
    ],
)
def test_durations_parse(text: str, seconds: int) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    "text",
    [
        *("", "30", "m", "-5m", "+5m", "5 m", "5M", "1.5h", "0m", "0d0h", "3661d", "1y"),
        "9" * 40,
        "0" * 40 + "1s",  # a second, but longer than any age is written: not read on
    ],
)
def test_anything_else_is_not_a_duration(text: str) -> None:
    with pytest.raises(ValueError, match=r"duration|longer"):
        parse_duration(text)


def test_a_negative_duration_is_named_as_such() -> None:
    with pytest.raises(ValueError, match=r"^'-5m' is negative: an age is a duration such as"):
        parse_duration("-5m")


# ---- filters -----------------------------------------------------------------------------------


def test_an_empty_filter_matches_everything() -> None:
    empty = OperatorFilter()
    assert empty.validated() is empty
    assert empty.is_empty
    assert empty.describe() == "all operations"
    assert empty.created_before(datetime.now(UTC)) is None


def test_a_filter_describes_itself_and_its_age() -> None:
    now = datetime(2026, 12, 1, 12, tzinfo=UTC)
    found = OperatorFilter("bob", OperationState.QUEUED, "cv.review", timedelta(hours=2))
    assert not found.validated().is_empty
    assert found.describe() == "owner=bob state=queued task=cv.review older_than=7200s"
    assert found.created_before(now) == datetime(2026, 12, 1, 10, tzinfo=UTC)
    assert not OperatorFilter(state=OperationState.FAILED).is_empty


def test_an_age_alone_is_a_filter_and_its_bounds_are_inclusive() -> None:
    """``opsctl operations cancel --older-than 2h`` names a filter: it is not refused as
    naming nothing. Ages of 0 and of ``OLDER_THAN_MAX`` are within bounds."""
    assert not OperatorFilter(older_than=timedelta(hours=2)).is_empty
    for edge in (timedelta(0), bounds.OLDER_THAN_MAX):
        assert OperatorFilter(older_than=edge).validated().older_than == edge


@pytest.mark.parametrize(
    ("filters", "field"),
    [
        (OperatorFilter(owner_id="not an owner!"), "owner"),
        (OperatorFilter(owner_id="a" * 65), "owner"),
        (OperatorFilter(task_type="Bad Task"), "task_type"),
        (OperatorFilter(older_than=timedelta(seconds=-1)), "older_than"),
        (OperatorFilter(older_than=bounds.OLDER_THAN_MAX + timedelta(days=1)), "older_than"),
    ],
)
def test_a_bad_filter_is_an_invalid_argument(filters: OperatorFilter, field: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        filters.validated()
    assert refused.value.field == field


def test_operator_names_are_bounded() -> None:
    assert operator_name("carol@ops") == "carol@ops"
    assert operator_name("x" * NAME_MAX) == "x" * NAME_MAX  # the column holds it
    for bad in ("", "a b", "x" * 65, "eve\n", "ünicode"):
        with pytest.raises(InvalidArgument):
            operator_name(bad)


# ---- the third scope --------------------------------------------------------------------------

OTHER_SCOPES: list[Scope] = [
    NeutralScope(),
    *(NeutralScope(role=role) for role in Role),
    *(OwnerScope(role, "alice") for role in Role),
]


def test_only_the_operator_scope_is_the_operator_scope() -> None:
    scope = OperatorScope()
    assert scope.role is Role.OPERATOR
    assert require_operator(scope) is scope
    for other in OTHER_SCOPES:
        with pytest.raises(PermissionDenied) as refused:
            require_operator(other)
        assert refused.value.code == "operator_scope_required"


def test_the_operator_scope_is_neither_an_owner_nor_the_neutral_worker() -> None:
    with pytest.raises(PermissionDenied):
        require_owner(OperatorScope())
    with pytest.raises(PermissionDenied):
        require_neutral_worker(OperatorScope())


def test_an_operator_credential_names_its_holder() -> None:
    token = mint_service_token(signing_key(Role.OPERATOR), subject="carol")
    assert verify_service_token(trusted(), token, max_age_seconds=3600).role is Role.OPERATOR
    assert _subject(token) == "carol"
    plain = mint_service_token(signing_key(Role.WORKER))
    assert _subject(plain) == "worker"  # unnamed: the key's own name


def _subject(verified: str) -> object:
    return jwt.decode(verified, options={"verify_signature": False})["sub"]


# ---- the operator Tx scope --------------------------------------------------------------------


def test_the_operator_tx_is_entered_only_from_the_neutral_scope() -> None:
    with pytest.raises(ScopeViolation):
        OperatorTx(Tx(NO_CONNECTION, "alice"))
    operator_tx = OperatorTx(Tx(NO_CONNECTION, None))
    assert operator_tx.owner_id is None
    as_bob = operator_tx.as_owner("bob")
    assert type(as_bob) is Tx
    assert as_bob.owner_id == "bob"
    with pytest.raises(ScopeViolation):
        operator_tx.as_owner("")


@pytest.mark.parametrize("owner", [None, "alice"])
def test_operator_storage_refuses_any_other_scope(owner: str | None) -> None:
    tx = cast(OperatorTx, Tx(NO_CONNECTION, owner))  # what a mistaken caller would pass
    now = datetime.now(UTC)
    with pytest.raises(ScopeViolation):
        store.show(tx, "0" * 32)
    with pytest.raises(ScopeViolation):
        store.list_page(tx, size=10, token="", filters=OperatorFilter(), now=now)
    with pytest.raises(ScopeViolation):
        store.cancel(tx, "0" * 32, now)
    with pytest.raises(ScopeViolation):
        store.retry(tx, "0" * 32, now)


def test_operator_storage_checks_the_filter_itself() -> None:
    tx = OperatorTx(Tx(NO_CONNECTION, None))
    bad = OperatorFilter(owner_id="not an owner!")
    with pytest.raises(InvalidArgument) as refused:
        store.list_page(tx, size=10, token="", filters=bad, now=datetime.now(UTC))
    assert refused.value.field == "owner"


@pytest.mark.parametrize("owner", [None, "alice"])
def test_console_links_are_made_and_revoked_only_in_the_operator_scope(owner: str | None) -> None:
    tx = cast(OperatorTx, Tx(NO_CONNECTION, owner))  # what a mistaken caller would pass
    with pytest.raises(ScopeViolation):
        console_store.create_link(tx, "ops-carol", datetime.now(UTC))
    with pytest.raises(ScopeViolation):
        console_store.end_operator(tx, None)


def test_console_sign_ins_are_opened_resolved_and_ended_in_no_owners_scope() -> None:
    owners, secret, now = Tx(NO_CONNECTION, "alice"), "a" * 43, datetime.now(UTC)
    with pytest.raises(ScopeViolation):
        console_store.open_link(owners, secret, now)
    with pytest.raises(ScopeViolation):
        console_store.resolve(owners, secret, now)
    with pytest.raises(ScopeViolation):
        console_store.end(owners, secret)


def test_the_pause_table_takes_only_a_task_types_name() -> None:
    """Checked where it is written, whoever calls: no claim could name another."""
    tx = Tx(NO_CONNECTION, None)
    with pytest.raises(InvalidArgument):
        task_pauses.pause(tx, "Bad Type", "ops-carol", datetime.now(UTC))
    with pytest.raises(InvalidArgument):
        task_pauses.resume(tx, "Bad Type")


# ---- the gateway reaches it only for the console, with a session (ADR 0045) -------------------

CONSOLE_MODULES = ("gateway/console.py", "gateway/console_calls.py")


def test_only_the_console_modules_of_the_gateway_reach_the_operator_service() -> None:
    reached = _reach("durable_ops.gateway.main")
    assert "durable_ops.operations.operator" not in reached  # the servicer stays in its process
    mentions = [
        str(path.relative_to(SERVICES))
        for path in sorted((SERVICES / "gateway").rglob("*"))
        if path.is_file()
        and path.suffix in {".py", ".js", ".html"}
        and any(
            needle in path.read_text()
            for needle in ("Role.OPERATOR", "OperatorService", "operator_pb2", '"operator"')
        )
    ]
    assert sorted(mentions) == sorted(CONSOLE_MODULES)
    calls = (SERVICES / "gateway" / "console_calls.py").read_text()
    assert "Role.OPERATOR" not in calls  # it signs with the gateway's key only
    assert calls.count("metadata=") == 2  # the session call, and the sign-in's (no session yet)
    assert "OPERATOR_SESSION, self.session_id" in calls


def test_the_gateway_credential_and_routes_reach_the_operator_scope_only_under_console() -> None:
    from durable_ops.gateway.app import create_app
    from durable_ops.gateway.backends import Backends

    settings = Settings(service_keys_dir=str(keys_dir()))
    backends = Backends.from_settings(settings)
    assert backends.caller.role is Role.GATEWAY  # the only credential the gateway holds
    app = create_app(settings, backends)
    paths = [str(getattr(route, "path", "")) for route in app.routes]
    assert paths
    assert [path for path in paths if "operator" in path.lower()] == []
    console_paths = [path for path in paths if path.startswith("/console")]
    assert console_paths
    assert all(path == "/console" or path.startswith("/console/") for path in console_paths)


@pytest.mark.parametrize("method", sorted(console.CONSOLE_CALLS))
def test_a_console_session_makes_the_console_calls(method: str) -> None:
    console.require_console_call(method)


@pytest.mark.parametrize(
    "method", ["PruneOperations", "CreateConsoleLink", "EndOperatorSessions", "Anything"]
)
def test_a_console_session_makes_no_other_call(method: str) -> None:
    with pytest.raises(PermissionDenied) as refused:
        console.require_console_call(method)
    assert refused.value.code == "operator_scope_required"


def test_a_bulk_action_names_one_to_a_hundred_operations_once_each() -> None:
    assert console.bulk_ids(["b", "a", "b"]) == ["b", "a"]
    with pytest.raises(InvalidArgument):
        console.bulk_ids([])
    with pytest.raises(InvalidArgument):
        console.bulk_ids([f"{n}" for n in range(console.BULK_MAX + 1)])
    assert len(console.bulk_ids(["x"] * 500)) == 1


def test_the_filter_searches_by_failure_code_within_bounds() -> None:
    found = OperatorFilter(failure_code="model_error").validated()
    assert not found.is_empty
    assert found.describe() == "failure=model_error"
    with pytest.raises(InvalidArgument):
        OperatorFilter(failure_code="x" * (bounds.FAILURE_CODE_MAX + 1)).validated()
    # The CLI sent a control character on to the database: no stored code has one.
    for odd in ("model\x00error", "model\x1b[2J", "Model Error"):
        with pytest.raises(InvalidArgument):
            OperatorFilter(failure_code=odd).validated()
