"""``opsctl``: run, migrate and administer durable-ops.

Each command imports what it runs only when chosen, so ``opsctl --help`` and
the small admin commands start fast.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from durable_ops.local_secrets import KEPT, with_kept_secrets
from durable_ops.settings import Settings, SettingsError

EXIT_USAGE = 2
EXIT_REFUSED = 3

GRPC_SERVICES: dict[str, str] = {
    "operations": "durable_ops.operations.main",
    "notifications": "durable_ops.notifications.main",
    "ai-admission": "durable_ops.ai_admission.main",
    "workspace": "durable_ops.workspace.main",
}
SERVE_TARGETS = [*GRPC_SERVICES, "gateway", "ai-worker", "dev-model"]


def _settings(args: argparse.Namespace, *, keep_secrets: Sequence[str] = ()) -> Settings:
    """Settings from the environment; the ``keep_secrets`` named, when unset, from var/."""
    settings = Settings.from_env()
    url = getattr(args, "database_url", None)
    if url:
        from dataclasses import replace

        settings = replace(settings, database_url=url)
    if keep_secrets:
        settings = with_kept_secrets(settings, keep_secrets)
    return settings


def _run_async(factory: Callable[[], Coroutine[Any, Any, None]]) -> None:
    with contextlib.suppress(KeyboardInterrupt):  # the servers stop themselves on SIGINT
        asyncio.run(factory())


def cmd_serve(args: argparse.Namespace) -> int:
    from importlib import import_module

    from durable_ops.logs import configure_logging
    from durable_ops.storage.migrate import SchemaNotCurrent

    # Only the gateway signs and checks user tokens; every process holds a service credential.
    needed = KEPT if args.target == "gateway" else ("service_secret",)
    settings = _settings(args, keep_secrets=needed)
    configure_logging(settings, process=args.target)
    try:
        if args.target in GRPC_SERVICES:
            module = import_module(GRPC_SERVICES[args.target])
            _run_async(lambda: module.run(settings))
        elif args.target == "gateway":
            from durable_ops.gateway.main import run as run_gateway

            run_gateway(settings)
        elif args.target == "dev-model":
            from durable_ops.dev_model import run as run_dev_model

            run_dev_model(settings.dev_model_bind, seconds=settings.dev_model_seconds)
        else:
            from durable_ops.ai_worker.main import run as run_worker

            _run_async(lambda: run_worker(settings))
    except SchemaNotCurrent as exc:
        print(f"opsctl serve {args.target}: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    from durable_ops.storage import migrate

    settings = _settings(args)
    if args.to:
        migrate.migrate_to(settings.database_url, args.to)
    else:
        migrate.upgrade(settings.database_url)
    print(f"schema at {args.to or migrate.head_revision()}")
    return 0


def cmd_token(args: argparse.Namespace) -> int:
    from durable_ops.gateway.auth import mint_user_token
    from durable_ops.model import bounds

    settings = _settings(args, keep_secrets=("jwt_secret",))
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
    from durable_ops.storage.migrate import open_migrated

    bounds.owner_id(args.user)
    db = open_migrated(_settings(args).database_url, pool_size=1)
    try:
        view = db.run(
            lambda s: workspace.update_ai_settings(s, utc_now(), plan=args.plan),
            owner_id=args.user,
        )
    finally:
        db.dispose()
    print(f"{args.user}: plan {view.plan}, ai_enabled {str(view.ai_enabled).lower()}")
    return 0


def cmd_ai(args: argparse.Namespace) -> int:
    from durable_ops.clock import utc_now
    from durable_ops.storage import capacity
    from durable_ops.storage.migrate import open_migrated

    db = open_migrated(_settings(args).database_url, pool_size=1)
    try:
        if args.switch != "status":
            enabled = args.switch == "enable"
            db.run(lambda s: capacity.set_ai_enabled(s, enabled, utc_now()), owner_id=None)
        state = db.run(lambda s: capacity.lock_control(s).ai_enabled, owner_id=None, write=False)
    finally:
        db.dispose()
    print(f"AI globally {'enabled' if state else 'disabled'}")
    return 0


def cmd_host_store_show(args: argparse.Namespace) -> int:
    from durable_ops.hoststore.view import show

    return show(args.directory, as_json=args.json, out=sys.stdout)


def cmd_up(args: argparse.Namespace) -> int:
    from durable_ops.up import run_stack

    return run_stack(_settings(args, keep_secrets=KEPT), demo_user=args.demo_user)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("durable-ops")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="opsctl", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, run: Callable[[argparse.Namespace], int], help_: str) -> Any:
        sub = commands.add_parser(name, help=help_, description=help_)
        sub.set_defaults(run=run)
        return sub

    def database_option(sub: Any) -> None:
        sub.add_argument("--database-url", help="overrides OPS_DATABASE_URL")

    up = command("up", cmd_up, "migrate the database and run every process, embedded")
    database_option(up)
    up.add_argument("--demo-user", default="demo", help="user given Pro and AI (default: demo)")

    serve = command("serve", cmd_serve, "run one process in the foreground")
    serve.add_argument("target", choices=SERVE_TARGETS)
    database_option(serve)

    migrate = command("migrate", cmd_migrate, "upgrade the schema to head (or --to REV)")
    migrate.add_argument("--to", metavar="REV", help="revision to move to, e.g. base")
    database_option(migrate)

    token = command("token", cmd_token, "print a user JWT for the gateway")
    token.add_argument("--user", required=True)
    token.add_argument("--ttl", type=int, default=3600, metavar="SECONDS")

    users = command("users", lambda _args: EXIT_USAGE, "manage users")
    user_commands = users.add_subparsers(dest="users_command", required=True, metavar="COMMAND")
    set_plan = user_commands.add_parser(
        "set-plan", help="set a user's plan", description="set a user's plan"
    )
    set_plan.set_defaults(run=cmd_users_set_plan)
    set_plan.add_argument("user")
    set_plan.add_argument("plan", choices=["free", "pro"])
    database_option(set_plan)

    ai = command("ai", cmd_ai, "switch AI admission on or off for everyone, live")
    ai.add_argument("switch", choices=["enable", "disable", "status"])
    database_option(ai)

    host_store = command("host-store", lambda _args: EXIT_USAGE, "inspect a host operation store")
    store_commands = host_store.add_subparsers(dest="store_command", required=True)
    show = store_commands.add_parser(
        "show",
        help="list records read-only (no lock, no writes)",
        description="list records read-only (no lock, no writes)",
    )
    show.set_defaults(run=cmd_host_store_show)
    show.add_argument("directory")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result: int = args.run(args)
    except SettingsError as exc:
        print(f"opsctl: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:
        from durable_ops.model.errors import DomainError

        if isinstance(exc, DomainError):
            print(f"opsctl: {exc.message}", file=sys.stderr)
            return EXIT_USAGE
        raise
    return result


if __name__ == "__main__":
    sys.exit(main())
