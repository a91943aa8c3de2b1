"""``opsctl up``: every process of the product as children of one command.

Before the first child starts, every setting a child would refuse and every
address is checked (a bad or taken one is a clear message and exit 2).
Dev-login is switched on only while the gateway listens on loopback alone;
otherwise ``opsctl up`` says why and leaves it off. A child that dies after
start-up comes back with backoff (``stack.restarts``) until its budget is
spent; then, as on Ctrl-C or SIGTERM, every child is stopped, saying what it
waits for and how long the stop took: the AI worker first hands back what it
was running, then the services stop. A second Ctrl-C kills what is left at
once. While it runs, ``var/stack.json`` says where (``stack.address_file``):
the CLI's commands find the stack there. It holds ``var/up.lock`` all along
(``stack.lock``): a second ``opsctl up`` from the same directory is refused,
naming the first one's pid.
A refusal at start for a bad setting, another stack or an address taken leaves no
file behind; one met once ``var/`` is made (a keys folder it cannot write, a database
that does not answer, a full disk) leaves what it had made, which the next start uses.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

from durable_ops.gateway.hosts import dev_login_refusal
from durable_ops.local_secrets import with_kept_secrets
from durable_ops.logs import configure_logging, use_json
from durable_ops.private_files import unwritable_place
from durable_ops.settings import Settings, variable
from durable_ops.stack import address_file, lock
from durable_ops.stack.binds import local_to_the_stack, parse_address, stack_binds
from durable_ops.stack.children import Stack, process_specs, serves
from durable_ops.stack.output import STACK, Output
from durable_ops.stack.preflight import problems
from durable_ops.stack.restarts import RestartBudget
from durable_ops.storage import schema_stamp
from durable_ops.telemetry import check_environment

EXIT_UNAVAILABLE = 1
EXIT_USAGE = 2
# How long the development model takes per answer under `opsctl up` unless
# OPS_DEV_MODEL_SECONDS is set: slow enough to watch an operation's progress
# climb in the UI, quick enough not to be a wait (`opsctl serve dev-model` and
# the tests default to 0).
UP_DEV_MODEL_SECONDS = 4.0
SUPERVISE_SECONDS = 0.2
# The four gRPC services share the first child (``stack.children.SHARED``): a Python
# process costs ~1.5 s of CPU to start, and a warm start is mostly that (ADR 40).
# Started stage by stage, each once the one before answers. The gateway after the
# services: a call it made before them (an open tab retrying through a restart) left
# its channel in gRPC's reconnect backoff, failing fast for seconds after they were up,
# and the first page after the sign-in link was a 503. The worker last: a first claim
# that fails would warn, and nothing on the way to the link needs it.
START_STAGES = (("services", "dev-model"), ("gateway",), ("ai-worker",))
DEFAULT_PROCESSES = tuple(name for stage in START_STAGES for name in stage)


def _stack_env(settings: Settings, *, text_logs: bool = False) -> dict[str, str]:
    env = {
        "OPS_DATABASE_URL": settings.database_url,
        "OPS_WORKERS_AI_OPERATIONS_ENABLED": "true",
        "OPS_DEV_LOGIN": "0" if _dev_login_refusal(settings) else "1",
        **{bind.variable: bind.address for bind in stack_binds(settings)},
        "OPS_OPERATIONS_TARGET": settings.operations_target,
        "OPS_NOTIFICATIONS_TARGET": settings.notifications_target,
        "OPS_AI_ADMISSION_TARGET": settings.ai_admission_target,
        "OPS_WORKSPACE_TARGET": settings.workspace_target,
        "OPS_AI_LOCAL_URL": settings.ai_local_url,
    }
    if "OPS_DEV_MODEL_SECONDS" not in os.environ:
        env["OPS_DEV_MODEL_SECONDS"] = str(UP_DEV_MODEL_SECONDS)
    if text_logs and "OPS_LOG_JSON" not in os.environ:
        env["OPS_LOG_JSON"] = "false"  # the children's stdout is our pipe, not the terminal
    # The operator's user-token secret, or the one kept in var/ (``local_secrets``), and the
    # service keys (``stack_keys``): the same across restarts, so nobody is signed out.
    env["OPS_JWT_SECRET"] = settings.jwt_secret
    env["OPS_SERVICE_KEYS_DIR"] = settings.service_keys_dir
    return env


def _listed(names: tuple[str, ...]) -> str:
    """The children as a user may be told them: a shared one names what it serves."""
    return ", ".join(
        f"{name} ({', '.join(serves(name))})" if serves(name) != (name,) else name for name in names
    )


# What `opsctl up` makes once in the keys folder (rpc.keys, rpc.tls), checked by path so a
# warm start imports neither (nor grpc) before its children run.
KEPT_KEYS = (
    *(f"{role}/{role}.key" for role in ("gateway", "worker", "producer", "operator")),
    "public/ca.pem",
    "tls/server.pem",
    "tls/server.key",
)


def _keys_made(directory: Path) -> bool:
    return all((directory / kept).is_file() for kept in KEPT_KEYS)


def _where(database_url: str) -> str:
    """The database as a user may be shown it: its engine and file or name, no password."""
    scheme, _, rest = database_url.partition("://")
    name = rest.rpartition("@")[2].partition("?")[0]  # no user or password
    where = name.lstrip("/") if scheme != "sqlite" else name[1:]
    return f"{scheme.partition('+')[0]} {where}".rstrip()


def _dev_login_refusal(settings: Settings) -> str | None:
    """Why the stack's gateway may not serve dev-login (it listens beyond loopback)."""
    return dev_login_refusal(replace(settings, dev_login=True))


def grant_ai(database_url: str, user: str) -> None:
    """The Pro plan with AI on for ``user``: what the demo user of ``opsctl up`` gets."""
    from durable_ops.clock import utc_now
    from durable_ops.storage import workspace
    from durable_ops.storage.migrate import open_migrated

    db = open_migrated(database_url, pool_size=1)
    try:
        db.run(
            lambda tx: workspace.update_ai_settings(tx, utc_now(), ai_enabled=True, plan="pro"),
            owner_id=user,
        )
    finally:
        db.dispose()


def run_stack(
    settings: Settings,
    *,
    demo_user: str,
    database_source: str,
    budget: RestartBudget | None = None,
) -> int:
    """Run the stack until Ctrl-C or SIGTERM; ``database_source`` says where
    ``settings.database_url`` came from, for a message that cannot reach it."""
    settings = local_to_the_stack(settings)
    # A value a child would refuse is refused here, before any child runs: the OPS_* ones
    # were checked as they were read (``Settings``), the log format and OTEL_* ones now.
    as_json = use_json(settings.log_json, is_tty=sys.stdout.isatty())
    check_environment(os.environ)
    width = max(len(name) for name in DEFAULT_PROCESSES)
    output = Output(sys.stdout, as_json=as_json, width=width)
    # Its own log events (a schema a newer release wrote, say) go where every process's
    # go: stderr, JSON off a terminal. Unconfigured, structlog printed them as text on
    # stdout, among lines that are all JSON when piped.
    configure_logging(settings, process=STACK)
    # Checked before any file is made: a start refused for a bad setting leaves nothing.
    if variable("jwt_secret") in os.environ:  # else kept in var/, and checked once read there
        settings.check_user_token_secrets()
    if not settings.database_url.startswith("sqlite:///"):  # a warm start loads no SQLAlchemy
        from durable_ops.storage.availability import shown_url

        shown_url(settings.database_url, database_source)  # a URL it cannot use: refused
    try:
        lock.check_free()
        taken = problems(stack_binds(settings))
        for problem in taken:
            output.say("address_in_use", f"opsctl up: {problem}")
        if taken:
            return EXIT_USAGE
        if _host_store_held(settings.host_store_dir):
            output.say(
                "host_store_held",
                f"opsctl up: the host store in {settings.host_store_dir} (OPS_HOST_STORE_DIR)"
                " is held by another AI worker: stop it, or give this stack a store of its own",
            )
            return EXIT_USAGE
        held = lock.take()  # refused too if another stack started since the check
    except lock.StackRunning as running:
        output.say("already_running", f"opsctl up: {running}", pid=running.pid)
        return EXIT_USAGE
    except OSError as error:
        return _cannot_write(output, error, settings)
    try:
        return _run_held(
            with_kept_secrets(settings), output, demo_user, database_source, budget, as_json
        )
    except OSError as error:
        return _cannot_write(output, error, settings)
    finally:
        os.close(held)  # the lock goes with it


def _host_store_held(directory: str) -> bool:
    """Its AI worker would be refused the store at every restart until ``opsctl up`` gave
    up (a restored copy beside the original, two checkouts sharing one store)."""
    if not directory:
        return False
    from durable_ops.hoststore.lockfile import held_elsewhere

    return held_elsewhere(directory)


_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


def _cannot_write(output: Output, error: OSError, settings: Settings) -> int:
    """One line for a start that could not write its files: a place that cannot hold
    them is a bad setting (exit 2), a full disk not; any other error is raised."""
    keys = Path(settings.service_keys_dir).absolute()
    in_keys = error.filename is not None and Path(error.filename).absolute().is_relative_to(keys)
    refused = unwritable_place(
        error,
        "OPS_SERVICE_KEYS_DIR" if in_keys else "the directory opsctl up runs in (it keeps var/)",
    )
    if refused is not None:
        output.say("cannot_write", f"opsctl up: {refused}")
        return EXIT_USAGE
    if error.errno not in _DISK_FULL:
        raise error
    where = f" {error.filename}" if error.filename else ""
    output.say("cannot_write", f"opsctl up: cannot write{where}: {error.strerror or error}")
    return EXIT_UNAVAILABLE


def _run_held(
    settings: Settings,
    output: Output,
    demo_user: str,
    database_source: str,
    budget: RestartBudget | None,
    as_json: bool,
) -> int:
    """Everything after the start-up checks, with the directory's lock held."""
    say = output.say
    if schema_stamp.sqlite_file_at_head(settings.database_url):
        say("database", f"database {_where(settings.database_url)}: schema up to date")
    else:
        from durable_ops.storage import migrate
        from durable_ops.storage.availability import reaching

        with reaching(settings.database_url, database_source):  # a bad URL: refused, exit 2
            say("migrating", f"migrating the database ({_where(settings.database_url)})…")
            migrate.upgrade(settings.database_url)
    if not _keys_made(Path(settings.service_keys_dir)):
        from durable_ops.rpc.keys import ensure_role_keys
        from durable_ops.rpc.tls import ensure_tls

        ensure_role_keys(Path(settings.service_keys_dir))
        ensure_tls(Path(settings.service_keys_dir))  # the authority `opsctl serve` uses too
        say("keys", f"made service keys and certificates in {settings.service_keys_dir}")
    stack = Stack(
        _stack_env(settings, text_logs=not as_json),
        process_specs(settings, DEFAULT_PROCESSES),
        as_json=as_json,
        tethered=True,  # a killed `opsctl up` takes its children with it
    )
    say(
        "starting",
        f"starting {len(DEFAULT_PROCESSES)} processes: {_listed(DEFAULT_PROCESSES)}…",
        processes=DEFAULT_PROCESSES,
    )
    stopping = threading.Event()
    forcing = threading.Event()

    def request_stop(_signum: int, _frame: object) -> None:
        if stopping.is_set():
            forcing.set()  # the second Ctrl-C
        stopping.set()

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    # Already so on a warm start: read without SQLAlchemy, whose import is a second of CPU
    # the children's start would share.
    grant = bool(demo_user) and not schema_stamp.sqlite_file_grants_ai(
        settings.database_url, demo_user
    )
    try:
        for number, stage in enumerate(START_STAGES):
            stack.start(stage)
            if number == 0 and grant:  # while they start: the first sign-in needs it, not they
                grant_ai(settings.database_url, demo_user)
            stack.wait_healthy(names=stage)
        # A wildcard bind's own address (0.0.0.0) is not a name the gateway answers to.
        url = f"http://{parse_address('gateway_bind', settings.gateway_bind).dialled}/"
        # Where `opsctl operations` and the like find this stack without a variable.
        address_file.write(settings, url, pid=os.getpid())
        say("stack_up", f"\ndurable-ops is up at {url}", url=url)
        refusal = _dev_login_refusal(settings)
        if refusal is not None:
            say("dev_login_off", f"opsctl up: {refusal}.")
            say("sign_in", f"sign in: {url} with a token from `opsctl token --user U`\n", url=url)
        elif demo_user:
            how = f"Development sign-in as {demo_user}, who has the Pro plan with AI on"
            say("sign_in", f"sign in: {url} ({how})\n", url=url, user=demo_user)
        return _supervise(stack, stopping, output, budget or RestartBudget())
    except (RuntimeError, TimeoutError) as exc:
        say("start_failed", f"opsctl up: {exc}")
        return EXIT_UNAVAILABLE
    finally:
        _stop(stack, output, forcing)
        address_file.remove(pid=os.getpid())


def _stop(stack: Stack, output: Output, forcing: threading.Event) -> None:
    """Stop every child, saying what it waits for and how long it took."""
    started = time.monotonic()
    workers, services = stack.stopping_order()
    if not (workers or services):
        stack.stop()  # reaps what exited
        return
    waits = [f"{', '.join(workers)} to hand back running work"] if workers else []
    waits += [f"{', '.join(services)} to stop"] if services else []
    output.say(
        "stopping",
        f"\nstopping… waiting for {' then '.join(waits)} (Ctrl-C again to force)",
        workers=workers,
        services=services,
    )
    killed = stack.stop(force=forcing)
    # The sentence says the figure the record carries (rounded once: 0.3503 s would read
    # "0.4 s" beside a field of 0.35, which prints as "0.3").
    took = round(time.monotonic() - started, 3)
    if killed:
        output.say("killed", f"killed {', '.join(killed)}", children=killed)
    output.say("stopped", f"stopped in {took:.1f} s", seconds=took)


def _supervise(
    stack: Stack, stopping: threading.Event, output: Output, budget: RestartBudget
) -> int:
    """Restart children that die, with backoff, until asked to stop or a budget is spent;
    stop at once when one refused a setting (exit 2, as at a start of its own: a host
    store it cannot write, a service key refused): every restart would refuse it again."""
    due: dict[str, float] = {}
    while not stopping.wait(SUPERVISE_SECONDS):
        now = time.monotonic()
        for label in stack.dead():
            if label in due:
                continue
            code = stack.children[label].returncode
            if code == EXIT_USAGE:
                output.say(
                    "refused",
                    f"opsctl up: {label} refused a setting (exit 2: its line above says"
                    " which); stopping everything.",
                    child=label,
                    code=code,
                )
                return EXIT_USAGE
            delay = budget.next_delay(label, now)
            if delay is None:
                output.say(
                    "gave_up",
                    f"opsctl up: {label} {_exit(code)} after {budget.limit} restarts within"
                    f" {budget.window:.0f} s; stopping everything.",
                    child=label,
                    code=code,
                )
                return EXIT_UNAVAILABLE
            output.say(
                "restarting",
                f"{label} {_exit(code)}; restarting in {delay:.1f} s"
                f" (restart {budget.used(label)} of {budget.limit}).",
                child=label,
                code=code,
                delay_seconds=delay,
            )
            due[label] = now + delay
        for label, at in list(due.items()):
            if at <= now:
                del due[label]
                stack.restart(label)
    return 0


def _exit(code: int) -> str:
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"
