"""``opsctl``: run, migrate and administer durable-ops.

Each command imports what it runs only when chosen, so ``opsctl --help`` and
the small admin commands start fast.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from durable_ops.local_secrets import with_kept_secrets
from durable_ops.settings import Settings, SettingsError

if TYPE_CHECKING:
    from pathlib import Path

    from durable_ops.stack.address_file import Target
    from durable_ops.storage.db import Database

# `opsctl` exit codes (README "Exit codes").
EXIT_UNFORESEEN = 1  # a traceback, or a server that did not start for a reason it logged
EXIT_USAGE = 2  # a bad setting or argument, an address already in use included
EXIT_REFUSED = 3  # the database schema is not the one this code needs: run `opsctl migrate`
# The database did not answer (within OPS_DATABASE_WAIT_SECONDS, for a service), or refused us;
# for a command over gRPC, the service answered that its own database is away (ADR 66).
EXIT_DATABASE_UNAVAILABLE = 4
# 5 and 6 are the operator commands' (operator_cli): a refused call, a plan not confirmed.
EXIT_UNHEALTHY = 7  # `opsctl status`: a check is down (the database, a service, the gateway)
EXIT_DEGRADED = 8  # `opsctl status`: none is down, but one is degraded or could not be read
Answer = TypeVar("Answer")
PRO_DAILY_TOKENS_HELP = "100,000"  # model.budgets.PRO_DAILY_TOKENS, not imported: a fast --help

GRPC_SERVICES: dict[str, str] = {
    "operations": "durable_ops.operations.main",
    "notifications": "durable_ops.notifications.main",
    "ai-admission": "durable_ops.ai_admission.main",
    "workspace": "durable_ops.workspace.main",
}
SERVE_TARGETS = [*GRPC_SERVICES, "gateway", "ai-worker", "dev-model"]
ROLES = ["gateway", "worker", "producer", "operator"]  # model.scope.Role, without its import
# What a process serving several gRPC services calls itself (logs, traces): `opsctl up`'s
# child of that name runs all four.
SERVICES_PROCESS = "services"


def _settings(args: argparse.Namespace, *, keep_secret: bool = False) -> Settings:
    """Settings from the environment, the database as ``--database-url`` says when given;
    with ``keep_secret``, the user-token secret, when unset, from var/."""
    from dataclasses import replace

    settings = Settings.from_env()
    if getattr(args, "database_url", None):
        settings = replace(settings, database_url=args.database_url)
    if keep_secret:
        settings = with_kept_secrets(settings)
    return settings


def _database(args: argparse.Namespace, *, running_stack: bool = True) -> Target:
    """The database URL a command uses, and where it came from: ``--database-url``, else
    OPS_DATABASE_URL, else (``running_stack``) the one the running ``opsctl up`` recorded in
    var/stack.json, else the SQLite file. A command that writes to the database itself
    thus writes where the running stack reads."""
    from durable_ops.stack.address_file import STACK_PATH, choose_target

    return choose_target(
        "database_url",
        getattr(args, "database_url", None),
        os.environ,
        STACK_PATH if running_stack else None,
        flag_name="--database-url",
    )


def _on_database(args: argparse.Namespace, work: Callable[[Database], Answer]) -> Answer:
    """``work`` on the command's database (``_database``) at the head revision, asked once;
    a failure to reach it is one line and an exit code (``main``)."""
    from durable_ops.storage.availability import reaching
    from durable_ops.storage.migrate import open_migrated

    database = _database(args)
    with reaching(database.address, database.source):
        db = open_migrated(database.address, pool_size=1)
        try:
            return work(db)
        finally:
            db.dispose()


def _operator() -> str:
    """Who runs this command, as the records and the audit lines name them."""
    import getpass

    from durable_ops.model.operator import operator_name

    try:
        return operator_name(getpass.getuser())
    except Exception:  # no login name, or one the record would not take
        return "opsctl"


def _audit(event: str, *, operator: str | None = None, **fields: Any) -> None:
    """The audit line of a change an operator made: what, and who (``operator``, default
    the login name). On stderr: stdout is the command's answer. Only for the logs a
    script's or a service's stderr goes to: a person at a terminal has it all in the
    answer, which a log line beside it would only clutter. In the format of every other
    log line (``OPS_LOG_JSON``)."""
    if sys.stderr.isatty():
        return
    import structlog

    _log_as_opsctl()
    structlog.get_logger("durable_ops.audit").info(
        event, **fields, operator=operator or _operator()
    )


def _log_as_opsctl() -> None:
    """The command's own log lines (an audit line, a wait) as every process writes them."""
    from durable_ops.logs import configure_logging

    try:
        settings = Settings.from_env()
    except SettingsError:  # one this command does not read: the change it made is logged
        settings = Settings()
    configure_logging(settings, process="opsctl")


def _run_async(factory: Callable[[], Coroutine[Any, Any, None]]) -> None:
    with contextlib.suppress(KeyboardInterrupt):  # the servers stop themselves on SIGINT
        asyncio.run(factory())


def cmd_serve(args: argparse.Namespace) -> int:
    from durable_ops.logs import configure_logging
    from durable_ops.telemetry import configure_tracing

    targets: list[str] = list(dict.fromkeys(args.targets))
    if len(targets) > 1 and not set(targets) <= set(GRPC_SERVICES):
        others = ", ".join(t for t in targets if t not in GRPC_SERVICES)
        print(
            f"opsctl serve: only gRPC services share a process ({', '.join(GRPC_SERVICES)});"
            f" run {others} on its own",
            file=sys.stderr,
        )
        return EXIT_USAGE
    process = _serve_process(targets)
    settings = _settings(args)
    taken = _taken_addresses(settings, targets)
    if taken:
        for problem in taken:
            print(f"opsctl serve {process}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    if process == "gateway":
        # Only the gateway signs and checks user tokens; service keys are files (``rpc.keys``).
        settings = with_kept_secrets(settings)
    configure_logging(settings, process=process, final=True)
    # Before any server, channel or engine exists: the instrumentations wrap their constructors.
    configure_tracing(process)
    if process == "gateway":
        return _serve_gateway(settings)
    if process == "dev-model":
        from durable_ops.dev_model import run as run_dev_model

        run_dev_model(settings.dev_model_bind, seconds=settings.dev_model_seconds)
        return 0
    if process == "ai-worker":
        from durable_ops.ai_worker.main import run as run_worker

        _run_async(lambda: run_worker(settings))
        return 0
    source = _database(args, running_stack=False).source
    return _serve_grpc(settings, targets, process, source)


def _taken_addresses(settings: Settings, targets: list[str]) -> list[str]:
    """One sentence per address of ``targets`` that something already listens on: a bad
    setting (exit 2) said before anything starts, as ``opsctl up`` says it."""
    from durable_ops.stack.binds import serve_binds
    from durable_ops.stack.preflight import in_use

    return [
        f"{bind.address} is already in use ({bind.variable}); stop what listens there or set"
        f" {bind.variable} to another address"
        for bind in serve_binds(settings, targets)
        if in_use(bind)
    ]


def _serve_gateway(settings: Settings) -> int:
    from uvicorn.config import STARTUP_FAILURE

    from durable_ops.gateway.main import run as run_gateway

    try:
        run_gateway(settings)
    except SystemExit as ended:
        # uvicorn's 3 would read as "schema not current" here; what failed (an address
        # taken since our check, say) is its log line just above.
        if ended.code != STARTUP_FAILURE:
            raise
        print("opsctl serve gateway: the server did not start (its log says why)", file=sys.stderr)
        return EXIT_UNFORESEEN
    return 0


def _serve_process(targets: list[str]) -> str:
    """What the process serving ``targets`` calls itself (its logs, its last word)."""
    return SERVICES_PROCESS if len(targets) > 1 else targets[0]


def _serve_grpc(settings: Settings, targets: list[str], process: str, database_source: str) -> int:
    """One gRPC service, or several in one process; only these reach the database
    (the other processes do not import SQLAlchemy at all). A schema behind this code,
    or a database that stays away, ends it with one line (``main``)."""
    from importlib import import_module

    from durable_ops.serving import serve_together
    from durable_ops.storage.availability import reaching

    runs = {name: import_module(GRPC_SERVICES[name]).run for name in targets}
    with reaching(settings.database_url, database_source):
        if len(runs) == 1:
            _run_async(lambda: runs[process](settings))
        else:
            _run_async(lambda: serve_together(settings, runs))
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    from durable_ops.storage import migrate
    from durable_ops.storage.availability import reaching, shown_url

    database = _database(args)
    shown = shown_url(database.address, database.source)
    _log_as_opsctl()  # a wait for another migration says so on stderr
    with reaching(database.address, database.source):
        if args.check:
            where = f"{shown} (from {database.source})"
            return _migrate_check(where, *migrate.pending_revisions(database.address))
        with migrate.migration_lock(database.address):  # from the first read to the last
            return _migrate(args, database.address, shown, database.source)


def _migrate(args: argparse.Namespace, url: str, shown: str, source: str) -> int:
    """``opsctl migrate`` up, or ``--to`` a revision, with the migration lock held."""
    from durable_ops.operator_cli import EXIT_NOT_CONFIRMED
    from durable_ops.storage import migrate

    before = migrate.stamped_revision(url)
    # A move down drops what each revision undone added, with all it holds: asked first.
    undone = migrate.revisions_undone(before, args.to) if args.to else []
    if undone and not args.yes:
        where = f"{shown} (from {source})"
        if args.to == "base":
            print(f"would drop every table of {where}, at {before}, undoing:")
        else:
            print(
                f"would move {where} down from {before} to {args.to}, dropping what these"
                " added (tables, columns, indexes) and all it holds:"
            )
        for revision, added in undone:
            print(f"  {revision}  {plain(added)}")
        print(f"opsctl migrate --to {args.to}: not confirmed; add --yes", file=sys.stderr)
        return EXIT_NOT_CONFIRMED
    if args.to:
        migrate.migrate_to(url, args.to)
    else:
        migrate.upgrade(url)
    reached = migrate.stamped_revision(url)
    if reached == before:  # read under the lock: nothing moved it but this run, which did not
        # Not an audit line: those record a change (docs/operations.md), and this is none.
        print(f"schema at {reached or 'base (no tables)'} already: nothing applied")
        return 0
    _audit("schema_migrated", database=shown, from_revision=before, to_revision=reached)
    print(f"schema at {reached or 'base (no tables)'}")
    return 0


def _migrate_check(
    database: str, current: str | None, head: str, pending: list[tuple[str, str]]
) -> int:
    """``opsctl migrate --check``: 0 when nothing is pending, else ``EXIT_REFUSED`` (the
    services refuse this schema) after naming each pending revision. ``database`` is the
    one read as it may be shown (``shown_url``: no password) and where it came from."""
    print(f"{database}: schema at {current or 'base (no tables)'}; this release's head is {head}")
    if not pending:
        newer = "" if current == head else " (a newer release's: this one runs on it)"
        print(f"up to date{newer}")
        return 0
    print(f"{len(pending)} pending (`opsctl migrate` applies them):")
    for revision, adds in pending:
        print(f"  {revision}  {plain(adds)}")
    return EXIT_REFUSED


def cmd_token(args: argparse.Namespace) -> int:
    from durable_ops.gateway.auth import MAX_USER_TOKEN_SECONDS, mint_user_token
    from durable_ops.model import bounds

    if not 1 <= args.ttl <= MAX_USER_TOKEN_SECONDS:
        print(
            f"opsctl token: --ttl must be between 1 and {MAX_USER_TOKEN_SECONDS} seconds"
            " (30 days); mint a new token when one runs out",
            file=sys.stderr,
        )
        return EXIT_USAGE
    settings = _settings(args, keep_secret=True)
    bounds.owner_id(args.user)
    print(
        mint_user_token(
            settings.jwt_secret,
            args.user,
            args.ttl,
            issuer=settings.jwt_issuer,
            audience=settings.jwt_audience,
        )
    )
    return 0


def cmd_users_set_plan(args: argparse.Namespace) -> int:
    from durable_ops.clock import utc_now
    from durable_ops.model import bounds
    from durable_ops.storage import workspace

    bounds.owner_id(args.user)
    view = _on_database(
        args,
        lambda db: db.run(
            lambda tx: workspace.update_ai_settings(tx, utc_now(), plan=args.plan),
            owner_id=args.user,
        ),
    )
    _audit("plan_set", owner=args.user, plan=view.plan)
    print(f"{args.user}: plan {view.plan}, ai_enabled {str(view.ai_enabled).lower()}")
    return 0


def cmd_users_set_budget(args: argparse.Namespace) -> int:
    from durable_ops.clock import utc_now
    from durable_ops.model import bounds, budgets
    from durable_ops.storage import budgets as budget_store
    from durable_ops.storage import workspace

    bounds.owner_id(args.user)
    try:
        daily_tokens = _budget_tokens(args.tokens)
    except ValueError as refused:
        print(refused, file=sys.stderr)
        return EXIT_USAGE
    set_by = _operator()
    now = utc_now()

    def set_budget(tx: Any) -> budget_store.BudgetView:
        budget_store.set_override(tx, daily_tokens, set_by=set_by, now=now)
        return budget_store.view(tx, workspace.ai_settings(tx).plan, now)

    view = _on_database(args, lambda db: db.run(set_budget, owner_id=args.user))
    _audit("token_budget_set", owner=args.user, daily_tokens=daily_tokens, operator=set_by)
    source = "the plan's default" if daily_tokens is None else f"set by {set_by}"
    print(
        f"{args.user}: daily token budget {view.limit:,} ({source});"
        f" {budgets.used_today(spent=view.spent, reserved=view.reserved)},"
        f" renews {budgets.renews_at(now):%Y-%m-%d %H:%M} UTC"
    )
    return 0


def cmd_users_set_share(args: argparse.Namespace) -> int:
    from durable_ops.clock import utc_now
    from durable_ops.model import bounds, fairness
    from durable_ops.storage import shares

    bounds.owner_id(args.user)
    low, high = fairness.WEIGHT_RANGE
    raw = args.weight
    if raw != "default" and not (raw.isascii() and raw.isdigit() and low <= int(raw) <= high):
        print(
            f"opsctl users set-share: WEIGHT must be `default` or a whole number from {low}"
            f" to {high}, not {raw!r}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    weight = None if raw == "default" else int(raw)
    set_by = _operator()
    now = utc_now()

    def set_share(tx: Any) -> int:
        shares.set_weight(tx, weight, set_by=set_by, now=now)
        return shares.weight_of(tx)

    effective = _on_database(args, lambda db: db.run(set_share, owner_id=args.user))
    _audit("owner_share_set", owner=args.user, weight=weight, operator=set_by)
    source = "the default" if weight is None else f"set by {set_by}"
    print(
        f"{args.user}: share {effective} ({source}); within a priority, {effective} turn(s)"
        " for each turn of an owner of share 1, from their next operation"
    )
    return 0


def _budget_tokens(raw: str) -> int | None:
    """``default`` → None (the plan's), else whole tokens within what one owner may have."""
    from durable_ops.model import budgets

    if raw == "default":
        return None
    if not raw.isascii() or not raw.isdigit() or int(raw) > budgets.DAILY_TOKENS_MAX:
        raise ValueError(
            f"opsctl users set-budget: TOKENS must be `default` or a whole number from 0 to"
            f" {budgets.DAILY_TOKENS_MAX:,}, not {raw!r}"
        )
    return int(raw)


def cmd_sessions_revoke(args: argparse.Namespace) -> int:
    from durable_ops.clock import utc_now
    from durable_ops.model import bounds
    from durable_ops.storage import sessions

    bounds.owner_id(args.user)
    ended = _on_database(
        args, lambda db: db.run(lambda tx: sessions.revoke_user(tx, utc_now()), owner_id=args.user)
    )
    _audit("sessions_revoked", owner=args.user, sessions=ended)
    print(f"{args.user}: {ended} session(s) ended; tokens issued until now are refused")
    return 0


def cmd_ai(args: argparse.Namespace) -> int:
    import json

    from durable_ops.clock import utc_now
    from durable_ops.model.tasks import TASKS
    from durable_ops.storage import capacity

    settings = _settings(args)

    def switch_and_read(db: Database) -> tuple[bool, int]:
        if args.switch != "status":
            enabled = args.switch == "enable"
            db.run(lambda tx: capacity.set_ai_enabled(tx, enabled, utc_now()), owner_id=None)
        state = db.run(lambda tx: capacity.lock_control(tx).ai_enabled, owner_id=None, write=False)
        active = db.run(
            lambda tx: capacity.active_for_everyone(tx, TASKS.names()), owner_id=None, write=False
        )
        return state, active

    state, active = _on_database(args, switch_and_read)
    if args.switch != "status":
        _audit("ai_switched", enabled=state)
    global_limit, user_limit, running_pid = _ai_limits(settings, _database(args).address)
    if args.json:
        status = {
            "ai_enabled": state,
            "active_operations": active,
            "global_limit": global_limit,
            "user_limit": user_limit,
            "limits_from": "environment" if running_pid is None else "running_stack",
        }
        print(json.dumps(status))
    else:
        whose = (
            "as set in this environment (not read from the AI Admission service)"
            if running_pid is None
            else f"of the running stack (`opsctl up`, pid {running_pid})"
        )
        print(f"AI globally {'enabled' if state else 'disabled'}")
        print(
            f"{active} AI operation{'' if active == 1 else 's'} active; limits {whose}:"
            f" {global_limit} in total (OPS_AI_GLOBAL_LIMIT),"
            f" {user_limit} per user (OPS_AI_USER_LIMIT)"
        )
    return 0


def _ai_limits(settings: Settings, database_url: str) -> tuple[int, int, int | None]:
    """The AI limits (in total, per user) and the pid of the ``opsctl up`` they are from.

    The running stack's own, as it recorded them in var/stack.json, when it uses this
    database; else (pid None) those this environment sets, said as such: a service started
    elsewhere read its own environment, and no call asks it for its limits."""
    from durable_ops.stack import address_file

    running = address_file.read()
    if running is not None and running.get("database_url") == database_url:
        global_limit, user_limit = running.get("ai_global_limit"), running.get("ai_user_limit")
        if isinstance(global_limit, int) and isinstance(user_limit, int):  # not an older file
            return global_limit, user_limit, int(running["pid"])
    return settings.ai_global_limit, settings.ai_user_limit, None


# ---- opsctl status: one look at the whole install ------------------------------------------


# How long `opsctl status` waits for each answer: a service that hangs reads as down within
# seconds. Each gRPC health check waits as long as the gateway's /readyz does (2 s).
def cmd_status(args: argparse.Namespace) -> int:
    from durable_ops.status_cli import run

    return run(args, _settings(args), _database(args), _operator)


def cmd_operations(args: argparse.Namespace) -> int:
    from durable_ops.operator_cli import run

    return run(args, _settings(args))


def cmd_console(args: argparse.Namespace) -> int:
    from durable_ops.console_cli import run

    return run(args, _settings(args))


def cmd_tasks(args: argparse.Namespace) -> int:
    from durable_ops.operator_cli import run_tasks

    return run_tasks(args, _settings(args))


def cmd_host_store_show(args: argparse.Namespace) -> int:
    from durable_ops.hoststore.view import show

    return show(args.directory, as_json=args.json, out=sys.stdout)


def cmd_up(args: argparse.Namespace) -> int:
    from durable_ops.stack.binds import with_port_base
    from durable_ops.up import run_stack

    settings = _settings(args)  # the kept secret only once the start-up checks passed
    if args.port_base is not None:
        settings = with_port_base(settings, args.port_base)
    # Not the running stack's database: this is a stack.
    database_source = _database(args, running_stack=False).source
    return run_stack(settings, demo_user=args.demo_user, database_source=database_source)


def _key_label(text: str) -> str:
    """An issued key's label, checked as the arguments are parsed: a bad one is a usage
    error naming the command. The rule is the same for every role."""
    from durable_ops.model.scope import Role
    from durable_ops.rpc import keys

    try:
        keys.key_name(Role.WORKER, text)
    except SettingsError as bad:
        raise argparse.ArgumentTypeError(str(bad)) from None
    return text


def cmd_keys(args: argparse.Namespace) -> int:
    from pathlib import Path

    from durable_ops.private_files import writing_under

    with writing_under("OPS_SERVICE_KEYS_DIR"):
        return _keys(args, Path(_settings(args).service_keys_dir))


def _keys(args: argparse.Namespace, directory: Path) -> int:
    from durable_ops.model.scope import Role
    from durable_ops.rpc import keys, tls

    if args.keys_command == "init":
        unknown = sorted(set(args.roles) - set(ROLES))
        if unknown:
            print(f"opsctl keys init: no role {', '.join(unknown)}", file=sys.stderr)
            return EXIT_USAGE
        made = keys.ensure_role_keys(directory, [Role(role) for role in args.roles] or list(Role))
        if tls.ensure_tls(directory, args.tls_names):
            made.append("the services' TLS certificate")
        if made:
            _audit("service_keys_made", made=made, directory=str(directory))
        print(f"made {', '.join(made)}" if made else "every key exists already")
        return 0
    if args.keys_command == "issue":
        name = keys.key_name(Role(args.role), args.label)
        if keys.private_key_path(directory, name).exists():
            print(f"opsctl keys issue: {name} has a key already", file=sys.stderr)
            return EXIT_USAGE
        path = keys.create_key_pair(directory, name)
        _audit("service_key_issued", key=name, role=args.role, directory=str(directory))
    else:
        path = keys.rotate(directory, keys.key_name(Role(args.role)))
        _audit("service_key_rotated", role=args.role, directory=str(directory))
    print(path)
    return 0


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("durable-ops")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


SERVE_HELP = """\
operations     the Operations gRPC service (OPS_OPERATIONS_BIND, default 127.0.0.1:50051)
notifications  the Notifications gRPC service (OPS_NOTIFICATIONS_BIND, default 127.0.0.1:50052)
ai-admission   the AI Admission gRPC service (OPS_AI_ADMISSION_BIND, default 127.0.0.1:50053)
workspace      the Workspace gRPC service (OPS_WORKSPACE_BIND, default 127.0.0.1:50054)
gateway        the HTTP API and web UI (OPS_GATEWAY_BIND, default 127.0.0.1:8080)
ai-worker      claims AI operations (only with OPS_WORKERS_AI_OPERATIONS_ENABLED=true) and
               runs them, as many at once as OPS_WORKER_CONCURRENCY says
dev-model      the built-in development model (OPS_DEV_MODEL_BIND, default 127.0.0.1:8090)

Several gRPC services may share one process, each on its own address, and pay Python's
start-up once: opsctl up runs operations, notifications, ai-admission and workspace so.
Every OPS_* variable is listed in the README."""
UP_HELP = """\
Checks that every address is free (one taken: exit 2, and no file is made), migrates the
database (OPS_DATABASE_URL, default the SQLite file var/durable-ops.sqlite3), then runs
every process as a child of this one. A child that dies is restarted with backoff;
Ctrl-C or SIGTERM stops them all. The user-token secret, unless OPS_JWT_SECRET is set,
is kept in var/secrets.json; a service key per role is made in OPS_SERVICE_KEYS_DIR
(var/keys), each child given its own. One opsctl up per directory: a second one is
refused while the first runs (var/up.lock)."""


STATUS_HELP = """\
One line per check, each ok, degraded, unknown or down, and why:
  database       answers; its engine; its schema at this release's head, behind, or ahead
  operations, operator, notifications, workspace, ai-admission
                 each answers its standard gRPC health check (OPS_*_TARGET, else the
                 running opsctl up's addresses from var/stack.json, else the defaults)
  gateway        its /readyz answers ready
  ai-switch      AI admission on (degraded when off)
  task-types     none paused (degraded when one is)
  queue TYPE     per task type with unfinished work: queued, running and waiting, and how
                 long the oldest due one has waited (degraded past --max-wait)
  workers        operations running under a live lease; any past it the sweeper has not
                 ended within 30 s, or a task type whose work waits with none running
                 (degraded)
The queues are read with the operator key, as opsctl operations queues reads them. Each
answer is waited for a few seconds at most: status answers within about 5 s, even when
something hangs. Exit codes: 0 all ok; 7 something is down; 8 nothing is down, but
something is degraded or could not be read; 2 a usage error."""


def _max_wait(text: str) -> int:
    from durable_ops.model.operator import parse_duration

    try:
        return int(parse_duration(text).total_seconds())
    except ValueError as bad:
        raise argparse.ArgumentTypeError(str(bad)) from None


def plain(docstring: str) -> str:
    """A docstring's line as a terminal shows it: ``code`` and `code` lose their backquotes."""
    return re.sub(r"``?([^`]+?)``?", r"\1", docstring)


class OneLineParser(argparse.ArgumentParser):
    """A usage error is one line on stderr and exit 2 (SPEC §1), not argparse's usage block:
    ``opsctl users set-plan: argument plan: invalid choice: ...``. ``--help`` is unchanged.

    Every subcommand's parser is one too: ``add_subparsers`` makes its parsers of the
    class of the parser it is called on.
    """

    def parse_known_args(  # type: ignore[override]  # typeshed's overloads; same signature
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """Refuse an argument this parser does not know here, where it is known whose it
        was: argparse hands a subcommand's leftovers up to the top parser, whose error
        names only ``opsctl`` (``opsctl: unrecognized arguments: --bogus``); this names
        ``opsctl operations list``. So nothing is ever left over."""
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {' '.join(message.splitlines())}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="opsctl", description=plain(__doc__.splitlines()[0]))
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(
        name: str, run: Callable[[argparse.Namespace], int], help_: str, details: str = ""
    ) -> Any:
        sub = commands.add_parser(
            name,
            help=help_,
            description=f"{help_}.\n\n{details}" if details else f"{help_}.",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        sub.set_defaults(run=run)
        return sub

    def database_option(sub: Any, *, running_stack: bool = True) -> None:
        stack = ", else the running opsctl up's (var/stack.json)" if running_stack else ""
        sub.add_argument(
            "--database-url",
            help=f"the database (default: OPS_DATABASE_URL{stack}, else the SQLite file"
            " var/durable-ops.sqlite3)",
        )

    up = command("up", cmd_up, "Run the whole product on this machine", UP_HELP)
    database_option(up, running_stack=False)
    up.add_argument(
        "--demo-user", default="demo", help="user given Pro and AI; '' for none (default: demo)"
    )
    up.add_argument(
        "--port-base",
        type=int,
        metavar="N",
        help="listen on N (gateway), N+1 … N+4 (gRPC services), N+5 (dev model) instead of the"
        " OPS_*_BIND addresses; each OPS_*_METRICS_BIND that is set moves too: the worker's to"
        " N+6, the gateway's, operations', notifications', ai-admission's, workspace's to"
        " N+7 … N+11",
    )

    serve = command("serve", cmd_serve, "Run one process in the foreground", SERVE_HELP)
    serve.add_argument(
        "targets",
        nargs="+",
        choices=SERVE_TARGETS,
        metavar="TARGET",
        help="what to run; several gRPC services may share the process",
    )
    database_option(serve, running_stack=False)

    migrate = command(
        "migrate",
        cmd_migrate,
        "Upgrade the schema to the newest revision, or move it to --to REV",
        "Prints the revision reached, or that nothing was applied. A move down (--to an\n"
        "older revision, or base: every table) drops what each revision it undoes added,\n"
        "and all it holds: without --yes it prints those revisions and exits 6. Another\n"
        "migration of the same database running: it waits for that one (up to 10\n"
        "minutes), then does what is left.",
    )
    moves = migrate.add_mutually_exclusive_group()
    moves.add_argument("--to", metavar="REV", help="revision to move to, e.g. base or 0002")
    moves.add_argument(
        "--check",
        action="store_true",
        help="change nothing: name the database, print its schema's revision, the head and"
        " the pending revisions; exit 0 when up to date, 3 when revisions are pending",
    )
    migrate.add_argument("--yes", action="store_true", help="confirm a move down")
    database_option(migrate)

    token = command(
        "token",
        cmd_token,
        "Print a user JWT the gateway accepts (Authorization: Bearer, or pasted into the sign-in"
        " page)",
        "Signed with OPS_JWT_SECRET, else with the secret kept in var/secrets.json (the one\n"
        "opsctl up uses when OPS_JWT_SECRET is unset); OPS_JWT_ISSUER and OPS_JWT_AUDIENCE\n"
        "are honoured. A token lives at most 30 days (--ttl 2592000); the gateway refuses a\n"
        "longer-lived one.",
    )
    token.add_argument("--user", required=True, help="the owner id the token signs in as")
    token.add_argument(
        "--ttl", type=int, default=3600, metavar="SECONDS", help="lifetime (default: 3600)"
    )

    users = command("users", lambda _args: EXIT_USAGE, "Manage users")
    user_commands = users.add_subparsers(dest="users_command", required=True, metavar="COMMAND")
    set_plan = user_commands.add_parser(
        "set-plan",
        help="set a user's plan",
        description="Set a user's plan: pro allows AI analyses, free does not.",
    )
    set_plan.set_defaults(run=cmd_users_set_plan)
    set_plan.add_argument("user")
    set_plan.add_argument("plan", choices=["free", "pro"])
    database_option(set_plan)
    set_budget = user_commands.add_parser(
        "set-budget",
        help="set a user's daily AI token budget",
        description="Set how many model tokens a user's AI analyses may spend per UTC day"
        " (admission refuses past it with 429 budget_exhausted), or default for the"
        f" plan's ({PRO_DAILY_TOKENS_HELP} on Pro, 0 on Free). Records who ran it.",
    )
    set_budget.set_defaults(run=cmd_users_set_budget)
    set_budget.add_argument("user")
    set_budget.add_argument("tokens", metavar="TOKENS|default")
    database_option(set_budget)

    set_share = user_commands.add_parser(
        "set-share",
        help="set a user's share of the claim's turns",
        description="Set a user's weight among owners within a priority (1-100; default 1):"
        " an owner of weight 2 gets two turns for another's one when both wait."
        " Records who ran it.",
    )
    set_share.set_defaults(run=cmd_users_set_share)
    set_share.add_argument("user")
    set_share.add_argument("weight", metavar="WEIGHT|default")
    database_option(set_share)

    sessions = command("sessions", lambda _args: EXIT_USAGE, "Manage sign-in sessions")
    session_commands = sessions.add_subparsers(
        dest="sessions_command", required=True, metavar="COMMAND"
    )
    revoke = session_commands.add_parser(
        "revoke",
        help="end every session and token of a user",
        description="End every session of a user (their cookies get 401 at once) and refuse"
        " every token issued to them until now; tokens minted afterwards work.",
    )
    revoke.set_defaults(run=cmd_sessions_revoke)
    revoke.add_argument("--user", required=True, help="the owner id whose sign-ins end")
    database_option(revoke)

    ai = command(
        "ai",
        cmd_ai,
        "Switch AI admission on or off for everyone, live, or show whether it is on",
        "enable and disable take effect at the next admission (running analyses finish);\n"
        "status prints the switch, the AI operations active now and the limits\n"
        "(OPS_AI_GLOBAL_LIMIT, default 20; OPS_AI_USER_LIMIT, default 2).",
    )
    ai.add_argument("switch", choices=["enable", "disable", "status"], help="what to do")
    ai.add_argument("--json", action="store_true", help="machine-readable output")
    database_option(ai)

    key_commands = command(
        "keys",
        lambda _args: EXIT_USAGE,
        "Issue and rotate service keys",
        "Service keys live in OPS_SERVICE_KEYS_DIR (var/keys): <name>/<name>.key is a private\n"
        "key (0600), public/<name>.pub what the services trust, read again each second.",
    ).add_subparsers(dest="keys_command", required=True, metavar="COMMAND")
    init = key_commands.add_parser(
        "init",
        help="make each role's key, and the services' TLS certificate, where missing",
        description="Make a key pair for each ROLE (default: every role) that has none, and"
        " a local authority and the gRPC services' certificate (for localhost, loopback, the"
        " Compose service names and each --tls-name) if there is none.",
    )
    init.set_defaults(run=cmd_keys)
    # No ``choices``: argparse refuses an empty ``nargs="*"`` against them (Python 3.11).
    init.add_argument("roles", nargs="*", metavar="ROLE", help=f"of {', '.join(ROLES)}")
    init.add_argument(
        "--tls-name",
        dest="tls_names",
        action="append",
        default=[],
        metavar="NAME",
        help="a further name (or IP) the gRPC services are reached by, for their certificate",
    )
    issue = key_commands.add_parser(
        "issue",
        help="make a key for a new SDK worker or producer and print its path",
        description="Make a key pair named <role>-<label> (the services trust it within a"
        " second) and print the private key's path, for Worker(target, key=PATH).",
    )
    issue.set_defaults(run=cmd_keys)
    issue.add_argument("label", type=_key_label, help="who holds it: 1-48 of a-z, 0-9, '-' and '_'")
    issue.add_argument("--role", choices=["worker", "producer"], default="worker")
    rotate = key_commands.add_parser(
        "rotate",
        help="give a role a new key, trusting the old one until its holders restart",
        description="Make a new key for ROLE; its old public key is kept as"
        " public/ROLE.previous.pub (delete that file once every holder has restarted).",
    )
    rotate.set_defaults(run=cmd_keys)
    rotate.add_argument("role", choices=ROLES)

    from durable_ops.operator_cli import HELP as OPERATIONS_HELP
    from durable_ops.operator_cli import add_parser as add_operations_commands

    add_operations_commands(
        command(
            "operations",
            cmd_operations,
            "List, show, cancel, retry and prune every owner's operations; see the queues",
            OPERATIONS_HELP,
        )
    )

    from durable_ops.console_cli import HELP as CONSOLE_HELP
    from durable_ops.console_cli import add_parser as add_console_commands

    add_console_commands(
        command(
            "console",
            cmd_console,
            "Sign in to the operator console: a one-time link (operator key)",
            CONSOLE_HELP,
        )
    )

    status = command(
        "status",
        cmd_status,
        "Say whether this install is healthy, and if not, what is wrong",
        STATUS_HELP,
    )
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.add_argument(
        "--max-wait",
        type=_max_wait,
        default="5m",
        metavar="D",
        help="a queue whose oldest due operation has waited longer is degraded (default: 5m)",
    )
    status.add_argument(
        "--gateway-url",
        metavar="URL",
        help="the gateway (default: OPS_GATEWAY_URL, else the running opsctl up's, from"
        " var/stack.json, else OPS_GATEWAY_BIND's)",
    )
    database_option(status)

    from durable_ops.operator_cli import TASKS_HELP
    from durable_ops.operator_cli import add_tasks_parser as add_tasks_commands

    add_tasks_commands(
        command(
            "tasks",
            cmd_tasks,
            "Pause, resume and list task types (operator scope)",
            TASKS_HELP,
        )
    )

    host_store = command("host-store", lambda _args: EXIT_USAGE, "Inspect a host operation store")
    store_commands = host_store.add_subparsers(dest="store_command", required=True)
    show = store_commands.add_parser(
        "show",
        help="list records and tombstones read-only (no lock, no writes)",
        description="List records and tombstones read-only (no lock, no writes).",
    )
    show.set_defaults(run=cmd_host_store_show)
    show.add_argument("directory")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result: int = args.run(args)
        sys.stdout.flush()  # here, where a reader gone is caught, not at the exit
    except BrokenPipeError:
        # The reader left (`opsctl operations list | head`): what it read was all it wanted.
        # Python's own flush of stdout at exit would fail again: point it at nothing.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:
        code = _exit_code(exc)
        if code is None:
            raise  # unforeseen: the traceback is the report
        print(_last_word(args, exc, code), file=sys.stderr)
        return code
    return result


def _exit_code(error: Exception) -> int | None:
    """The README's exit code for an error a command reports in one line; None for one
    nobody foresaw. The one place these are mapped, for every command."""
    if isinstance(error, SettingsError):
        return EXIT_USAGE
    # Only a command that went to the database meets these: no SQLAlchemy import otherwise.
    if "durable_ops.storage.migrate" in sys.modules:
        from durable_ops.storage.availability import DatabaseUnavailable
        from durable_ops.storage.migrate import SchemaNotCurrent

        if isinstance(error, SchemaNotCurrent):
            return EXIT_REFUSED
        if isinstance(error, DatabaseUnavailable):
            return EXIT_DATABASE_UNAVAILABLE
    if "durable_ops.model.errors" in sys.modules:
        from durable_ops.model.errors import DomainError

        if isinstance(error, DomainError):
            return EXIT_USAGE
    return None


def _last_word(args: argparse.Namespace, error: Exception, code: int) -> str:
    """The one line: a served process names itself, and says it exits (it may have waited)."""
    if args.command != "serve":
        return f"opsctl: {getattr(error, 'message', error)}"
    process = _serve_process(list(dict.fromkeys(args.targets)))
    ending = "; exiting" if code == EXIT_DATABASE_UNAVAILABLE else ""
    return f"opsctl serve {process}: {error}{ending}"


if __name__ == "__main__":
    sys.exit(main())
