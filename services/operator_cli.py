"""``opsctl operations``: the operator's commands, over gRPC to the OperatorService (ADR 19).

Each call carries an ``operator`` service credential signed with the operator's
key (``OPS_SERVICE_KEY``, else ``operator/operator.key`` in ``OPS_SERVICE_KEYS_DIR``), naming
the operator (``--as``, default the login name) so the service's log says who
did what. It goes to the Operations service at ``--target``, else
``OPS_OPERATIONS_TARGET``, else the address the running ``opsctl up`` wrote to
``var/stack.json``, else 127.0.0.1:50051; when nothing answers there, one
sentence names the address and exit 2.

``cancel`` and ``retry`` take operation ids, or a filter (``--owner``,
``--state``, ``--task``, ``--older-than``): by filter they act only on the matches
they can change (unfinished ones; failed or cancelled ones), counting the others
they leave out, and print what they would do and stop, unless ``--yes`` confirms it.
``prune`` (ADR 0021) likewise counts what it would delete and stops, unless ``--yes``.

Only argparse and pure modules are imported here at load: ``opsctl --help``
stays fast; grpc is imported when a command runs.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any, TextIO

from durable_ops.cli import EXIT_DATABASE_UNAVAILABLE
from durable_ops.model import bounds
from durable_ops.model.errors import InvalidArgument
from durable_ops.model.lifecycle import RETRYABLE_STATES
from durable_ops.model.operator import OperatorFilter, age_text, operator_name, parse_duration
from durable_ops.model.retention import PRUNE_BATCH, PRUNE_BATCH_MAX, RetentionPolicy
from durable_ops.model.states import ACTIVE_STATES, OperationState

if TYPE_CHECKING:
    import grpc

    from durable_ops.api.operator.v1 import operator_pb2 as opb
    from durable_ops.api.operator.v1 import operator_pb2_grpc as opb_grpc
    from durable_ops.settings import Settings
    from durable_ops.stack.address_file import Target

EXIT_UNREACHABLE = 2  # nothing answers at the target: one sentence names it and how to move it
EXIT_FAILED = 5  # the service refused a call (the reason is printed)
# A cancel or retry by filter, a prune, or a move of the schema down (`opsctl migrate`), with
# something to do and without --yes: the plan is printed.
EXIT_NOT_CONFIRMED = 6
CALL_TIMEOUT_SECONDS = 10.0
# The service's error codes for a database that did not answer, or stayed locked, or that
# it still waits for at start (its only step before it serves, ADR 16): try again later,
# as after exit 4 of a command that opens the database itself (ADR 66).
DATABASE_AWAY = frozenset({"database_unavailable", "database_busy", "starting"})
# After a call failed as unavailable: how long the channel may take to connect before
# the target counts as unreachable (rather than a service that answered "unavailable").
PROBE_SECONDS = 1.0
LIST_LIMIT_DEFAULT = 100
PAGE_SIZE = 100
TOKEN_TTL_SECONDS = 300

HELP = """\
list    operations of every owner, newest first, filtered
show    one operation, with what only an operator sees (owner, lease, failure)
cancel  cancel operations by id, or by filter with --yes
retry   retry failed or cancelled operations by id, or by filter with --yes
prune   delete terminal operations past a horizon, keeping their keys, with --yes
queues  unfinished operations per task type, and how long the oldest queued one waits

Calls the Operations service at --target, else OPS_OPERATIONS_TARGET, else where the
running opsctl up serves it (var/stack.json), else 127.0.0.1:50051, with an operator
credential signed with the operator key (OPS_SERVICE_KEY, else var/keys/operator/operator.key).
Every call is logged by the service with --as (default: your login name). Exit codes:
2 a usage error, or nothing answers at the address; 4 the service's database did not
answer; 5 the service refused; 6 not confirmed."""


# ---- arguments ------------------------------------------------------------------------------


def _duration(text: str) -> Any:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _durations_may_be_negative(sub: argparse.ArgumentParser) -> None:
    """Let ``--older-than -5m`` reach the duration's own check, which says it is negative.

    argparse reads only a bare number (``-5``) after an option as its value; ``-5m`` it
    takes for an option, and answers "expected one argument". This makes any ``-`` then
    a digit a value, in this subcommand only (none of its options is spelled so).
    """
    sub._negative_number_matcher = re.compile(r"-\.?\d")


def _filter_options(sub: argparse.ArgumentParser) -> None:
    _durations_may_be_negative(sub)
    sub.add_argument("--owner", metavar="U", help="this owner only")
    sub.add_argument(
        "--state", choices=[state.value for state in OperationState], help="this state only"
    )
    sub.add_argument("--task", metavar="T", help="this task type only")
    sub.add_argument(
        "--failure-code", metavar="CODE", help="this stored failure only (model_error, …)"
    )
    sub.add_argument(
        "--older-than",
        type=_duration,
        metavar="D",
        help="created at least this long ago: 90s, 30m, 2h, 7d, 1w",
    )


def _common_options(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--as",
        dest="operator",
        metavar="NAME",
        help="who the service's log names (default: your login name)",
    )
    sub.add_argument(
        "--target",
        metavar="HOST:PORT",
        help="the Operations service (default: OPS_OPERATIONS_TARGET, else the running"
        " opsctl up from var/stack.json, else 127.0.0.1:50051)",
    )


def add_parser(operations: argparse.ArgumentParser) -> None:
    """The ``list``, ``show``, ``cancel``, ``retry``, ``prune`` and ``queues`` subcommands."""
    verbs = operations.add_subparsers(dest="operations_command", required=True, metavar="COMMAND")

    listing = verbs.add_parser(
        "list", help="list operations of every owner", description="List operations, newest first."
    )
    _filter_options(listing)
    listing.add_argument(
        "--limit",
        type=int,
        default=LIST_LIMIT_DEFAULT,
        metavar="N",
        help=f"at most N operations (default: {LIST_LIMIT_DEFAULT})",
    )
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    _common_options(listing)

    show = verbs.add_parser(
        "show",
        help="show one operation",
        description="Show one operation of any owner, with owner, lease and failure.",
    )
    show.add_argument("operation_id", metavar="ID")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    _common_options(show)

    for verb, what in (("cancel", "Cancel"), ("retry", "Retry")):
        act = verbs.add_parser(
            verb,
            help=f"{what.lower()} operations by id, or by filter with --yes",
            description=f"{what} the operations named, or every one the filter matches"
            " (printed first; --yes to go ahead). Each runs as its owner's own"
            f" {verb} would.",
        )
        act.add_argument("operation_ids", nargs="*", metavar="ID")
        _filter_options(act)
        act.add_argument("--yes", action="store_true", help="go ahead with a bulk action")
        act.add_argument("--json", action="store_true", help="machine-readable output")
        _common_options(act)

    prune = verbs.add_parser(
        "prune",
        help="delete terminal operations past a horizon, keeping their keys (--yes)",
        description="Delete terminal operations that finished more than --older-than ago,"
        " keeping a tombstone of each so a create that repeats its key is refused, and"
        " forget tombstones past --tombstones-older-than (ADR 0021). Prints what it would"
        " remove and stops, unless --yes.",
    )
    _durations_may_be_negative(prune)
    prune.add_argument(
        "--older-than",
        type=_duration,
        required=True,
        metavar="D",
        help="finished at least this long ago: 30d, 12w",
    )
    prune.add_argument(
        "--tombstones-older-than",
        type=_duration,
        metavar="D",
        help="forget tombstones of operations finished this long ago (default: the service's"
        " OPS_TOMBSTONE_RETENTION_DAYS)",
    )
    prune.add_argument(
        "--batch-size",
        type=int,
        metavar="N",
        help=f"operations per transaction, 1-{PRUNE_BATCH_MAX} (default: {PRUNE_BATCH})",
    )
    prune.add_argument("--yes", action="store_true", help="go ahead and delete")
    prune.add_argument("--json", action="store_true", help="machine-readable output")
    _common_options(prune)

    queues = verbs.add_parser(
        "queues",
        help="unfinished operations per task type",
        description="Per task type: its queued, running and waiting operations, how long"
        " the oldest queued one has been due, and whether it is paused (the console's queue"
        " table).",
    )
    queues.add_argument("--json", action="store_true", help="machine-readable output")
    _common_options(queues)


def filter_of(args: argparse.Namespace) -> OperatorFilter:
    """The filter the options name; one given empty is refused, not read as "any"."""
    given = (("--owner", args.owner), ("--task", args.task), ("--failure-code", args.failure_code))
    for flag, value in given:
        if value == "":
            raise argparse.ArgumentTypeError(f"{flag} is empty; leave it out to match any")
    return OperatorFilter(
        owner_id=args.owner or "",
        state=OperationState(args.state) if args.state else None,
        task_type=args.task or "",
        older_than=args.older_than,
        failure_code=args.failure_code or "",
    ).validated()


def _name(args: argparse.Namespace) -> str:
    """``--as``, else the login name; ``--as ''`` is refused, not taken for "not given"."""
    if args.operator is not None:
        try:
            return operator_name(args.operator)
        except InvalidArgument as exc:
            raise argparse.ArgumentTypeError(f"--as {exc.reason}") from None
    try:
        return operator_name(getpass.getuser())
    except Exception:  # no login name, or one the log would not take
        return "opsctl"


# ---- the service -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Connection:
    """An open channel to the Operator service, and the credential every call carries."""

    channel: grpc.Channel
    stub: opb_grpc.OperatorServiceStub
    metadata: tuple[tuple[str, str], ...]


class Operator:
    """The stub and the credential of one ``opsctl`` run, made at its first call: a value
    refused before that call needs neither the operator's key nor a channel."""

    def __init__(self, settings: Settings, name: str) -> None:
        self._settings = settings
        self._name = name

    @cached_property
    def connection(self) -> Connection:
        return _connect(self._settings, self._name)

    @property
    def stub(self) -> opb_grpc.OperatorServiceStub:
        return self.connection.stub

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return self.connection.metadata

    def close(self) -> None:
        if "connection" in self.__dict__:  # made: cached_property keeps it there
            self.connection.channel.close()

    def list_all(self, filters: OperatorFilter, limit: int | None) -> Iterator[Any]:
        from durable_ops.api.operator.v1 import operator_pb2 as opb
        from durable_ops.rpc.states import state_to_pb

        token = ""
        left = limit
        while left is None or left > 0:
            request = opb.ListOperationsRequest(
                page_size=PAGE_SIZE if left is None else min(PAGE_SIZE, left),
                page_token=token,
                owner_id=filters.owner_id,
                task_type=filters.task_type,
                failure_code=filters.failure_code,
            )
            if filters.state is not None:
                request.state = state_to_pb(filters.state)
            if filters.older_than is not None:
                request.older_than.FromTimedelta(filters.older_than)
            page = self.stub.ListOperations(
                request, metadata=self.metadata, timeout=CALL_TIMEOUT_SECONDS
            )
            yield from page.operations
            if left is not None:
                left -= len(page.operations)
            token = page.next_page_token
            if not token:
                return


def _connect(settings: Settings, name: str) -> Connection:
    import grpc

    from durable_ops.api.operator.v1 import operator_pb2_grpc as opb_grpc
    from durable_ops.model.scope import Role
    from durable_ops.rpc.credentials import mint_service_token
    from durable_ops.rpc.keys import own_key
    from durable_ops.rpc.scope import AUTHORIZATION
    from durable_ops.rpc.tls import authority_of, channel_credentials, checked_name_options

    token = mint_service_token(own_key(settings, Role.OPERATOR), TOKEN_TTL_SECONDS, subject=name)
    target = settings.operations_target
    tls = channel_credentials(target, authority_of(settings.service_keys_dir))
    channel = (
        grpc.secure_channel(target, tls, options=checked_name_options(target))
        if tls
        else grpc.insecure_channel(target)
    )
    stub = opb_grpc.OperatorServiceStub(channel)
    return Connection(channel, stub, ((AUTHORIZATION, f"Bearer {token}"),))


# ---- output ------------------------------------------------------------------------------------


def view(message: opb.OperatorOperation) -> dict[str, Any]:
    """The operator's view as JSON: states and privacy as their lowercase names."""
    from durable_ops.api.operations.v1 import operations_pb2 as pb
    from durable_ops.rpc.states import state_from_pb

    op = message.operation
    found: dict[str, Any] = {
        "id": op.id,
        "owner_id": message.owner_id,
        "task_type": op.task_type,
        "state": state_from_pb(op.state).value,
        "attempt": op.attempt,
        "max_attempts": op.max_attempts,
        "progress_percent": op.progress_percent,
        "cancel_requested": op.cancel_requested,
        "priority": message.priority,
        "privacy": pb.Privacy.Name(message.privacy).removeprefix("PRIVACY_").lower(),
        "subject": {"type": op.subject.type, "id": op.subject.id},
    }
    for field in (
        "created_at",
        "updated_at",
        "started_at",
        "finished_at",
        "not_before",
        "deadline_at",
        "next_attempt_at",
    ):
        found[field] = _when(op, field)
    found["lease_expires_at"] = _when(message, "lease_expires_at")
    found["failure_code"] = message.failure_code or None
    found["failure_message"] = message.failure_message or None
    found["usage"] = usage_view(op, "usage")
    return found


def usage_view(message: Any, field: str) -> dict[str, Any] | None:
    """What model calls used, as the owner's DTO says it (the model's time in seconds)."""
    if not message.HasField(field):
        return None
    usage = getattr(message, field)
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "model_seconds": usage.model_ms / 1000,
    }


def usage_text(usage: dict[str, Any] | None) -> str | None:
    """``412 tokens (300 prompt + 112 completion) · 3.1 s``; None when nothing was used."""
    if usage is None:
        return None
    prompt, completion = usage["prompt_tokens"], usage["completion_tokens"]
    return (
        f"{prompt + completion} tokens ({prompt} prompt + {completion} completion)"
        f" · {usage['model_seconds']:.1f} s"
    )


def attempt_view(message: opb.OperatorAttempt) -> dict[str, Any]:
    """One attempt of the operator's view as JSON (empty strings as null)."""
    found: dict[str, Any] = {"attempt": message.attempt, "route": message.route}
    for field in ("started_at", "lease_expires_at", "ended_at"):
        found[field] = _when(message, field)
    for field in ("outcome", "failure_code", "failure_message", "provider", "model"):
        found[field] = getattr(message, field) or None
    found["usage"] = usage_view(message, "usage")
    return found


ATTEMPT_HEADER = (
    "#",
    "ROUTE",
    "STARTED",
    "ENDED",
    "OUTCOME",
    "FAILURE",
    "TOKENS",
    "MODEL TIME",
    "PROVIDER/MODEL",
)


def _attempts(rows: list[dict[str, Any]], out: TextIO) -> None:
    print(f"{'attempts':<17} {len(rows) or '-'}", file=out)
    if not rows:
        return
    cells = [
        [
            str(row["attempt"]),
            row["route"],
            row["started_at"] or "",
            row["ended_at"] or "running",
            row["outcome"] or "",
            row["failure_code"] or "",
            *_usage_cells(row["usage"]),
            "/".join(part for part in (row["provider"], row["model"]) if part),
        ]
        for row in rows
    ]
    widths = [
        max(len(line[i]) for line in [ATTEMPT_HEADER, *cells]) for i in range(len(ATTEMPT_HEADER))
    ]
    for line in [ATTEMPT_HEADER, *cells]:
        text = "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
        print(f"  {text}".rstrip(), file=out)
    for row in rows:
        if row["failure_message"]:
            print(f"  #{row['attempt']} {row['route']}: {row['failure_message']}", file=out)


def _usage_cells(usage: dict[str, Any] | None) -> tuple[str, str]:
    """An attempt's tokens as prompt+completion, and the model's time; "-" for none."""
    if usage is None:
        return "-", "-"
    tokens = f"{usage['prompt_tokens']}+{usage['completion_tokens']}"
    return tokens, f"{usage['model_seconds']:.1f} s"


def _when(message: Any, field: str) -> str | None:
    if not message.HasField(field):
        return None
    stamp: str = getattr(message, field).ToDatetime(tzinfo=UTC).isoformat()
    return stamp


COLUMNS = ("id", "owner_id", "task_type", "state", "attempt", "created_at")


def _table(rows: list[dict[str, Any]], out: TextIO) -> None:
    cells = [
        [
            row["id"],
            row["owner_id"],
            row["task_type"],
            row["state"],
            f"{row['attempt']}/{row['max_attempts']}",
            row["created_at"] or "",
        ]
        for row in rows
    ]
    header = ["ID", "OWNER", "TASK", "STATE", "ATTEMPT", "CREATED"]
    _print_table(header, cells, out)


def _print_table(header: list[str], cells: list[list[str]], out: TextIO) -> None:
    """Columns as wide as their widest cell, two spaces apart."""
    widths = [max(len(line[i]) for line in [header, *cells]) for i in range(len(header))]
    for line in [header, *cells]:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip(),
            file=out,
        )


def _details(row: dict[str, Any], out: TextIO) -> None:
    for key, value in row.items():
        if key == "subject":
            value = f"{value['type']}/{value['id']}"
        elif key == "usage":
            value = usage_text(value)
        print(f"{key:<17} {'-' if value is None else value}", file=out)


# ---- the commands ------------------------------------------------------------------------------


def _refused(exc: Exception, what: str) -> str:
    """``what: code: message``, the code the product's own: the stable one the service
    logs and sends (``not_retryable``, ``operation_not_found``), not the gRPC status it
    travels as (``failed_precondition``), which several codes share. A failure no service
    of ours answered (a deadline, a proxy) has none: its status names it."""
    import grpc

    if isinstance(exc, grpc.RpcError):
        call: Any = exc
        return f"{what}: {error_code(exc)}: {call.details()}"
    return f"{what}: {exc}"


def error_code(exc: grpc.RpcError) -> str:
    """The service's own error code of a failed call, else its gRPC status, lowercase."""
    from durable_ops.rpc.errors import ERROR_CODE

    call: Any = exc
    trailers = dict(call.trailing_metadata() or ())
    return str(trailers.get(ERROR_CODE) or call.code().name.lower())


def cmd_list(args: argparse.Namespace, operator: Operator, out: TextIO) -> int:
    if args.limit < 1:
        raise argparse.ArgumentTypeError("--limit must be at least 1")
    rows = [view(found) for found in operator.list_all(filter_of(args), args.limit)]
    if args.json:
        print(json.dumps(rows), file=out)
    else:
        _table(rows, out)
    return 0


def cmd_show(args: argparse.Namespace, operator: Operator, out: TextIO) -> int:
    from durable_ops.api.operator.v1 import operator_pb2 as opb

    found = operator.stub.GetOperation(
        opb.GetOperationRequest(operation_id=args.operation_id),
        metadata=operator.metadata,
        timeout=CALL_TIMEOUT_SECONDS,
    )
    row = view(found)
    row["attempts"] = [attempt_view(attempt) for attempt in found.attempts]
    if args.json:
        print(json.dumps(row), file=out)
    else:
        _details(_failure_labelled({key: row[key] for key in row if key != "attempts"}), out)
        _attempts(row["attempts"], out)
    return 0


# Where the operation's stored failure is its present one.
FAILING_STATES = frozenset(
    {
        OperationState.FAILED.value,
        OperationState.WAITING_FOR_RETRY.value,
        OperationState.WAITING_FOR_EXTERNAL_FALLBACK.value,
    }
)


def _failure_labelled(row: dict[str, Any]) -> dict[str, Any]:
    """The stored failure is the last one an attempt reported: a later attempt that succeeds
    (or a cancel) leaves it, only a retry clears it. Outside a failing state it is shown as
    ``last_failure_*``, so a succeeded operation does not read as failed; the attempts say
    which one it was."""
    if row["state"] in FAILING_STATES:
        return row
    last = {"failure_code": "last_failure_code", "failure_message": "last_failure_message"}
    return {last.get(key, key): value for key, value in row.items()}


def _act(verb: str, operator: Operator) -> Callable[[str], Any]:
    from durable_ops.api.operator.v1 import operator_pb2 as opb

    def act(operation_id: str) -> Any:
        if verb == "cancel":
            return operator.stub.CancelOperation(
                opb.CancelOperationRequest(operation_id=operation_id),
                metadata=operator.metadata,
                timeout=CALL_TIMEOUT_SECONDS,
            )
        return operator.stub.RetryOperation(
            opb.RetryOperationRequest(operation_id=operation_id),
            metadata=operator.metadata,
            timeout=CALL_TIMEOUT_SECONDS,
        )

    return act


# What a cancel or retry by filter acts on. The filter's other matches are left out, and
# counted: each would only be refused (already_terminal, not_retryable), and an incident's
# "cancel every T" must not read as failed (exit 5) for T's finished operations.
ACTS_ON = {"cancel": ACTIVE_STATES, "retry": RETRYABLE_STATES}
LEFT_OUT = {"cancel": "already finished", "retry": "neither failed nor cancelled"}
ACTED = {"cancel": "cancelled", "retry": "retried"}


def cmd_act(args: argparse.Namespace, operator: Operator, out: TextIO) -> int:
    """``cancel`` / ``retry``: the ids named, or every match of the filter once confirmed."""
    verb = args.operations_command
    filters = filter_of(args)
    if args.operation_ids and not filters.is_empty:
        raise argparse.ArgumentTypeError("name operation ids or a filter, not both")
    if not args.operation_ids and filters.is_empty:
        raise argparse.ArgumentTypeError(
            "name operation ids, or a filter (--owner, --state, --task, --older-than,"
            " --failure-code)"
        )
    if args.operation_ids:
        return _act_on(list(dict.fromkeys(args.operation_ids)), args, operator, out)
    listed = [view(found) for found in operator.list_all(filters, None)]
    matched = [row for row in listed if OperationState(row["state"]) in ACTS_ON[verb]]
    left_out = len(listed) - len(matched)
    if not matched:  # nothing to confirm, nothing to do: that is the whole answer
        nothing = f"no operation matches {filters.describe()}; nothing to {verb}"
        if left_out:
            nothing = (
                f"no operation matching {filters.describe()} can be {ACTED[verb]}"
                f" ({left_out} {LEFT_OUT[verb]}); nothing to {verb}"
            )
        print("[]" if args.json else nothing, file=out)
        return 0
    if not args.yes:
        _plan(verb, filters, matched, left_out, args.json, out)
        print(f"opsctl operations {verb}: not confirmed; add --yes", file=sys.stderr)
        return EXIT_NOT_CONFIRMED
    if left_out:
        print(
            f"opsctl operations {verb}: left out {left_out} {LEFT_OUT[verb]}"
            f" ({filters.describe()})",
            file=sys.stderr,
        )
    return _act_on([row["id"] for row in matched], args, operator, out)


def _state_text(row: dict[str, Any]) -> str:
    """A state as the operator reads it: a running operation asked to stop says so (the
    cancel is pushed to its worker, and it is running until the worker stops)."""
    if row["state"] == OperationState.RUNNING.value and row["cancel_requested"]:
        return "running, cancel requested"
    return str(row["state"])


def _plan(
    verb: str,
    filters: OperatorFilter,
    matched: list[dict[str, Any]],
    left_out: int,
    as_json: bool,
    out: TextIO,
) -> None:
    """What a bulk cancel or retry would do, printed for the operator to confirm."""
    if as_json:
        plan = {
            "would": verb,
            "filter": filters.describe(),
            "operations": matched,
            "left_out": left_out,
        }
        print(json.dumps(plan), file=out)
        return
    leaving = f"; left out {left_out} {LEFT_OUT[verb]}" if left_out else ""
    print(f"would {verb} {len(matched)} operations ({filters.describe()}){leaving}:", file=out)
    for row in matched:
        print(f"  {row['id']}  {row['owner_id']}  {row['state']}", file=out)


def _act_on(ids: list[str], args: argparse.Namespace, operator: Operator, out: TextIO) -> int:
    """Cancel or retry each of ``ids``; one refused does not stop the others (exit 5)."""
    import grpc

    verb = args.operations_command
    act = _act(verb, operator)
    done: list[dict[str, Any]] = []
    failed = 0
    for operation_id in ids:
        try:
            row = view(act(operation_id))
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.UNAVAILABLE:
                raise  # perhaps nothing answers: ``run`` says so once, not once per id
            failed += 1
            print(f"opsctl operations {verb}: {_refused(exc, operation_id)}", file=sys.stderr)
            continue
        done.append(row)
        if not args.json:
            print(f"{row['id']}  {row['owner_id']}  {_state_text(row)}", file=out)
    if args.json:
        print(json.dumps(done), file=out)
    return EXIT_FAILED if failed else 0


def cmd_prune(args: argparse.Namespace, operator: Operator, out: TextIO) -> int:
    """A dry run without ``--yes`` (exit 6 unless it found nothing to prune); else calls
    until the service has nothing more to prune."""
    from durable_ops.api.operator.v1 import operator_pb2 as opb

    if args.batch_size is not None:  # 0 is the service's "default"; here it is a mistake
        bounds.int_range("--batch-size", args.batch_size, (1, PRUNE_BATCH_MAX))
    if args.tombstones_older_than is not None:  # the service's rule, checked before calling
        RetentionPolicy(args.older_than, args.tombstones_older_than).validated()
    request = opb.PruneOperationsRequest(batch_size=args.batch_size or 0, dry_run=not args.yes)
    request.older_than.FromTimedelta(args.older_than)
    if args.tombstones_older_than is not None:
        request.tombstones_older_than.FromTimedelta(args.tombstones_older_than)
    pruned = forgotten = 0
    while True:
        answer = operator.stub.PruneOperations(
            request, metadata=operator.metadata, timeout=CALL_TIMEOUT_SECONDS
        )
        pruned += answer.pruned
        forgotten += answer.forgotten
        if not answer.more:
            break
    summary = {
        "dry_run": not args.yes,
        "pruned": pruned,
        "forgotten": forgotten,
        "finished_before": _when(answer, "finished_before"),
        "tombstones_finished_before": _when(answer, "tombstones_finished_before"),
    }
    if args.json:
        print(json.dumps(summary), file=out)
    elif not (pruned or forgotten):
        print(
            f"nothing to prune: no operation finished before {summary['finished_before']}"
            " and no tombstone of one finished before"
            f" {summary['tombstones_finished_before']}",
            file=out,
        )
    elif args.yes:
        print(
            f"pruned {pruned} operations finished before {summary['finished_before']};"
            f" forgot {forgotten} tombstones of operations finished before"
            f" {summary['tombstones_finished_before']}",
            file=out,
        )
    else:
        print(
            f"would prune {pruned} operations finished before {summary['finished_before']}"
            f" and forget {forgotten} tombstones of operations finished before"
            f" {summary['tombstones_finished_before']}",
            file=out,
        )
    if not args.yes and (pruned or forgotten):  # nothing to do asks nothing, as cancel
        print("opsctl operations prune: not confirmed; add --yes", file=sys.stderr)
        return EXIT_NOT_CONFIRMED
    return 0


# A queue's unfinished operations by state, as QueueDepth names them.
QUEUE_COUNTS = ("queued", "running", "waiting_for_retry", "waiting_for_external_fallback")


@dataclass(frozen=True)
class Queues:
    """What ``queues`` (and ``opsctl status``) read: each task type's unfinished work
    (``queue_view``), every task type paused or not (``task_type_view``), and when."""

    read_at: datetime
    rows: list[dict[str, Any]]
    task_types: list[dict[str, Any]]

    @property
    def paused(self) -> list[str]:
        return sorted(row["task_type"] for row in self.task_types if row["paused"])


def read_queues(operator: Operator, timeout: float = CALL_TIMEOUT_SECONDS) -> Queues:
    """The Operator service's queue depths (as the console and the metrics read them), and
    which task types are paused, as the console shows them: a paused type's queue grows
    and ages as a stuck one's would."""
    from durable_ops.api.operator.v1 import operator_pb2 as opb

    answer = operator.stub.GetQueueDepths(
        opb.GetQueueDepthsRequest(), metadata=operator.metadata, timeout=timeout
    )
    types = operator.stub.ListTaskTypes(
        opb.ListTaskTypesRequest(), metadata=operator.metadata, timeout=timeout
    )
    statuses = [task_type_view(status) for status in types.task_types]
    paused = {row["task_type"] for row in statuses if row["paused"]}
    read_at = answer.read_at.ToDatetime(tzinfo=UTC)
    rows = [queue_view(depth, read_at, paused=depth.task_type in paused) for depth in answer.queues]
    return Queues(read_at, rows, statuses)


def cmd_queues(args: argparse.Namespace, operator: Operator, out: TextIO) -> int:
    found = read_queues(operator)
    if args.json:
        answer = {
            "read_at": found.read_at.isoformat(),
            "queues": found.rows,
            "paused_task_types": found.paused,
        }
        print(json.dumps(answer), file=out)
        return 0
    if not found.rows:
        print("no unfinished operations", file=out)
    else:
        _queue_table(found.rows, out)
    if found.paused:
        print(f"paused: {', '.join(found.paused)} (opsctl tasks resume TYPE)", file=out)
    return 0


def queue_view(message: opb.QueueDepth, read_at: datetime, *, paused: bool) -> dict[str, Any]:
    """One task type's queue as JSON; the oldest queued one's wait, and how long the first
    lease of a running one has been past, counted to ``read_at``, the service's own clock,
    so a skewed local clock does not change them."""
    return {
        "task_type": message.task_type,
        "paused": paused,
        **{count: getattr(message, count) for count in QUEUE_COUNTS},
        "oldest_queued_at": _when(message, "oldest_queued_at"),
        "oldest_queued_seconds": _seconds_since(message, "oldest_queued_at", read_at),
        "running_past_lease": message.running_past_lease,
        "lease_overdue_since": _when(message, "lease_overdue_since"),
        "longest_past_lease_seconds": _seconds_since(message, "lease_overdue_since", read_at),
    }


def _seconds_since(message: Any, field: str, read_at: datetime) -> int | None:
    if not message.HasField(field):
        return None
    since = getattr(message, field).ToDatetime(tzinfo=UTC)
    return max(0, int((read_at - since).total_seconds()))


def _queue_table(rows: list[dict[str, Any]], out: TextIO) -> None:
    header = ["TASK", "QUEUED", "RUNNING", "RETRY", "FALLBACK", "OLDEST QUEUED"]
    cells = [
        [
            f"{row['task_type']} (paused)" if row["paused"] else row["task_type"],
            *(str(row[count]) for count in QUEUE_COUNTS),
            "-" if row["oldest_queued_seconds"] is None else age_text(row["oldest_queued_seconds"]),
        ]
        for row in rows
    ]
    _print_table(header, cells, out)


# ---- opsctl tasks (ADR 0047) -------------------------------------------------------------------

TASKS_HELP = """\
list    every registered task type and every paused one, with who paused it and when
pause   stop claims of TYPE: queued work waits, running work finishes, new analyses
        are refused (task_paused)
resume  let claims take TYPE again

Calls the Operations service as opsctl operations does (--target, --as); the
service logs every pause and resume with the operator's name."""


def add_tasks_parser(tasks: argparse.ArgumentParser) -> None:
    """The ``list``, ``pause`` and ``resume`` subcommands of ``opsctl tasks``."""
    verbs = tasks.add_subparsers(dest="tasks_command", required=True, metavar="COMMAND")
    listing = verbs.add_parser(
        "list",
        help="task types, paused or not",
        description="Every registered task type and every paused one, by name.",
    )
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    _common_options(listing)
    for verb, description in (
        (
            "pause",
            "Pause TYPE: no claim takes its operations (they stay queued), a running one"
            " finishes, and admission refuses new analyses of it until it is resumed.",
        ),
        ("resume", "Resume TYPE: claims take its queued operations again at once."),
    ):
        sub = verbs.add_parser(verb, help=f"{verb} a task type", description=description)
        sub.add_argument("task_type", metavar="TYPE")
        sub.add_argument("--json", action="store_true", help="machine-readable output")
        _common_options(sub)


def task_type_view(message: opb.TaskTypeStatus) -> dict[str, Any]:
    """A task type's pause as JSON. Its state is ``active`` or ``paused``: never an operation's
    word (``running``), which would read as work in progress."""
    return {
        "task_type": message.task_type,
        "state": "paused" if message.paused else "active",
        "paused": message.paused,
        "paused_by": message.paused_by or None,
        "paused_at": _when(message, "paused_at"),
    }


def cmd_tasks_list(args: argparse.Namespace, operator: Operator, out: TextIO) -> int:
    from durable_ops.api.operator.v1 import operator_pb2 as opb

    answer = operator.stub.ListTaskTypes(
        opb.ListTaskTypesRequest(), metadata=operator.metadata, timeout=CALL_TIMEOUT_SECONDS
    )
    rows = [task_type_view(status) for status in answer.task_types]
    if args.json:
        print(json.dumps(rows), file=out)
        return 0
    cells = [
        [
            row["task_type"],
            row["state"],
            f"by {row['paused_by']} at {row['paused_at']}" if row["paused"] else "",
        ]
        for row in rows
    ]
    header = ["TASK", "STATE", "PAUSED"]
    _print_table(header, cells, out)
    return 0


def cmd_tasks_change(args: argparse.Namespace, operator: Operator, out: TextIO) -> int:
    from durable_ops.api.operator.v1 import operator_pb2 as opb

    verb = args.tasks_command
    bounds.task_type(args.task_type)
    if verb == "pause":
        answer = operator.stub.PauseTaskType(
            opb.PauseTaskTypeRequest(task_type=args.task_type),
            metadata=operator.metadata,
            timeout=CALL_TIMEOUT_SECONDS,
        )
        _warn_if_unregistered(args.task_type)
    else:
        answer = operator.stub.ResumeTaskType(
            opb.ResumeTaskTypeRequest(task_type=args.task_type),
            metadata=operator.metadata,
            timeout=CALL_TIMEOUT_SECONDS,
        )
    row = {**task_type_view(answer.status), "changed": answer.changed}
    if args.json:
        print(json.dumps(row), file=out)
    elif verb == "pause":
        already = "" if answer.changed else " (already paused)"
        print(
            f"{row['task_type']}: paused by {row['paused_by']} at {row['paused_at']}{already};"
            " queued operations wait, running ones finish",
            file=out,
        )
    else:
        print(
            f"{row['task_type']}: "
            + ("resumed; claims take it again" if answer.changed else "was not paused"),
            file=out,
        )
    return 0


def _warn_if_unregistered(task_type: str) -> None:
    """A type the registry does not know may be paused (its worker deployed later, an SDK
    worker's own type), but it may be a misspelling, which would pause nothing: say so."""
    from durable_ops.model.tasks import TASKS

    if task_type not in TASKS:
        print(
            f"opsctl tasks pause: warning: {task_type} is not a registered task type;"
            " paused anyway (check the spelling: opsctl tasks list shows the registered ones)",
            file=sys.stderr,
        )


TASK_COMMANDS: dict[str, Callable[[argparse.Namespace, Operator, TextIO], int]] = {
    "list": cmd_tasks_list,
    "pause": cmd_tasks_change,
    "resume": cmd_tasks_change,
}


COMMANDS: dict[str, Callable[[argparse.Namespace, Operator, TextIO], int]] = {
    "list": cmd_list,
    "show": cmd_show,
    "cancel": cmd_act,
    "retry": cmd_act,
    "prune": cmd_prune,
    "queues": cmd_queues,
}


def _unreachable(channel: grpc.Channel) -> bool:
    import grpc

    try:
        grpc.channel_ready_future(channel).result(timeout=PROBE_SECONDS)
    except grpc.FutureTimeoutError:
        return True
    return False


def run(
    args: argparse.Namespace,
    settings: Settings,
    out: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    """Run the ``opsctl operations`` command ``args`` chose; usage errors exit 2."""
    verb = args.operations_command
    return _run("operations", verb, COMMANDS[verb], args, settings, out, environ)


def run_tasks(
    args: argparse.Namespace,
    settings: Settings,
    out: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    """Run the ``opsctl tasks`` command ``args`` chose; usage errors exit 2."""
    verb = args.tasks_command
    return _run("tasks", verb, TASK_COMMANDS[verb], args, settings, out, environ)


def _run(
    group: str,
    verb: str,
    command: Callable[[argparse.Namespace, Operator, TextIO], int],
    args: argparse.Namespace,
    settings: Settings,
    out: TextIO | None,
    environ: Mapping[str, str] | None,
) -> int:
    import grpc

    from durable_ops.stack.address_file import choose_target

    out = sys.stdout if out is None else out
    target = choose_target(
        "operations_target", args.target, os.environ if environ is None else environ
    )
    settings = replace(settings, operations_target=target.address)
    where = f"opsctl {group} {verb}"
    try:
        operator = Operator(settings, _name(args))
    except argparse.ArgumentTypeError as exc:
        print(f"{where}: {exc}", file=sys.stderr)
        return 2
    try:
        return command(args, operator, out)
    except (argparse.ArgumentTypeError, InvalidArgument) as exc:  # refused before any call
        print(f"{where}: {exc}", file=sys.stderr)
        return 2
    except grpc.RpcError as exc:
        return failed_call(exc, operator.connection.channel, target, where)
    finally:
        operator.close()


def failed_call(exc: grpc.RpcError, channel: grpc.Channel, target: Target, where: str) -> int:
    """Say why a call to the Operations service failed; the exit code that says it."""
    import grpc

    if exc.code() == grpc.StatusCode.UNAVAILABLE and _unreachable(channel):
        print(
            f"{where}: nothing answers at {target.address} ({target.source}); start the"
            " stack with `opsctl up`, or point at another with --target HOST:PORT or"
            " OPS_OPERATIONS_TARGET.",
            file=sys.stderr,
        )
        return EXIT_UNREACHABLE
    print(_refused(exc, where), file=sys.stderr)
    if error_code(exc) in DATABASE_AWAY:
        return EXIT_DATABASE_UNAVAILABLE
    return EXIT_FAILED
