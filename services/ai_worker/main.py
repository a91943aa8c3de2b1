"""``opsctl serve ai-worker``: the AI worker process.

Idle (and saying why, once) unless ``OPS_WORKERS_AI_OPERATIONS_ENABLED`` is
true; either way it stops on SIGTERM or SIGINT. Working, it opens the host
journal, settles what a previous worker on this host left unfinished, and
then runs a worker SDK ``Worker`` (``durable_ops.worker``) with a handler per
AI task type (ADR 0027) until it is told to stop.

How it sets the SDK: ``concurrency`` is ``OPS_WORKER_CONCURRENCY``; by default (0,
decided by the PROD-003 benchmark, ADR 0044) the local model server's slot count,
read once at start-up and bounded (``model.concurrency``): one inference at a time
on a one-slot server, on a server that does not say, and with a host store;
``batch_size`` 1, since an attempt lasts seconds and runs one at a time, a batch
would only hold leases idle while the first ran, and each claim starts with the
next route (ADR 0022 fills a claim's routes in order), so one operation per claim
keeps local and fallback work taking turns; completions gain nothing from
waiting for company either.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import replace

import prometheus_client
import structlog

from durable_ops.ai_worker import failures
from durable_ops.ai_worker.clients import OperationsClient, WorkspaceClient
from durable_ops.ai_worker.execution import Executor
from durable_ops.ai_worker.handlers import HANDLERS
from durable_ops.ai_worker.inference.router import Router
from durable_ops.ai_worker.journal import HostStoreJournal, JournalError, open_journal
from durable_ops.ai_worker.reconcile import reconcile
from durable_ops.ai_worker.server_slots import read_server_slots
from durable_ops.hoststore.errors import UnsafeDirectory, UnsupportedFileSystem
from durable_ops.model.concurrency import FOLLOW_SERVER_SLOTS, Startup, startup_concurrency
from durable_ops.model.errors import Unauthenticated
from durable_ops.model.routing import Route
from durable_ops.model.scope import Role
from durable_ops.rpc.client import ServiceCaller, open_channel
from durable_ops.rpc.keys import own_key
from durable_ops.rpc.tls import authority_of
from durable_ops.settings import Settings, SettingsError
from durable_ops.stop_signals import stopping_on_signals
from durable_ops.worker import Worker, WorkerOptions

# Short: an inference cut off is released (queued again, its attempt not spent) and the
# next worker starts it at once; and well inside the grace before SIGKILL.
SHUTDOWN_GRACE_SECONDS = 1.0
BATCH_SIZE = 1  # why: the module's docstring

_log = structlog.get_logger(__name__)


def registered_task_types() -> list[str]:
    """Task types in the registry that have a handler, highest priority first."""
    tasks = sorted((handler.task for handler in HANDLERS.values()), key=lambda t: -t.priority)
    return [task.name for task in tasks]


def worker_options(settings: Settings, routes: list[Route]) -> WorkerOptions:
    """The SDK's options for the AI worker (why each: the module's docstring)."""
    return WorkerOptions(
        concurrency=settings.worker_concurrency,
        batch_size=BATCH_SIZE,
        lease_seconds=settings.worker_lease_seconds,
        shutdown_seconds=SHUTDOWN_GRACE_SECONDS,
        routes=tuple(routes),
        trace_name="ai_worker",
    ).validated()


def build_worker(
    settings: Settings, executor: Executor, routes: list[Route], *, until_empty: bool = False
) -> Worker:
    """The SDK worker running ``executor``'s handler for every AI task type
    (``until_empty``: until a claim finds nothing, a drain)."""
    worker = Worker(
        settings.operations_target,
        own_key(settings, Role.WORKER),
        worker_options(settings, routes),
        ca=authority_of(settings.service_keys_dir),
        until_empty=until_empty,
        interceptors=[executor.journaled],
        classify=failures.settlement,
    )
    executor.register(worker)
    return worker


async def resolve_concurrency(settings: Settings) -> Startup:
    """The inferences this worker runs at once: ``OPS_WORKER_CONCURRENCY``, or with 0 the
    local model server's slot count read now (``model.concurrency.startup_concurrency``)."""
    slots = None
    if settings.worker_concurrency == FOLLOW_SERVER_SLOTS and not settings.host_store_dir:
        slots = await read_server_slots(settings.ai_local_url)
    return startup_concurrency(
        settings.worker_concurrency, slots, host_store=bool(settings.host_store_dir)
    )


def serve_metrics(bind: str) -> None:
    """The worker's Prometheus metrics (the local circuit state among them) on ``bind``."""
    host, _, port = bind.rpartition(":")
    if not host or not port.isdigit():
        raise SettingsError(f"OPS_WORKER_METRICS_BIND must be host:port, not {bind!r}")
    prometheus_client.start_http_server(int(port), addr=host.strip("[]"))
    _log.info("ai_worker_metrics", bind=bind)


async def run(settings: Settings, *, stopping: asyncio.Event | None = None) -> None:
    stopping = stopping or asyncio.Event()
    try:
        with stopping_on_signals(stopping.set):
            if not settings.workers_ai_operations_enabled:
                _log.info(
                    "ai_worker_idle",
                    reason="OPS_WORKERS_AI_OPERATIONS_ENABLED is not true: claiming nothing",
                    say="idle: OPS_WORKERS_AI_OPERATIONS_ENABLED is not true",
                )
                await stopping.wait()
            else:
                await _work(settings, stopping)
    finally:
        _log.info("ai_worker_stopped", say="stopped")


async def _work(settings: Settings, stopping: asyncio.Event) -> None:
    router = Router.from_settings(settings)  # its URLs and names: checked by ``Settings``
    host_id = settings.host_id or socket.gethostname()
    try:
        journal = open_journal(settings.host_store_dir, host_id)
    except JournalError as error:
        await router.aclose()
        # A folder the store refuses (missing, not ours, its mode, a network file system)
        # is a bad setting, exit 2, whose fix is the folder's, not the store's.
        if isinstance(error.__cause__, UnsafeDirectory | UnsupportedFileSystem):
            raise SettingsError(
                f"OPS_HOST_STORE_DIR cannot hold the host store: {error.__cause__.message}"
            ) from error
        raise SystemExit(f"opsctl serve ai-worker: {error.message}") from error
    startup = await resolve_concurrency(settings)
    settings = replace(settings, worker_concurrency=startup.concurrency)
    if settings.worker_metrics_bind:
        serve_metrics(settings.worker_metrics_bind)
    caller = ServiceCaller.from_settings(settings, Role.WORKER)
    ca = authority_of(settings.service_keys_dir)
    operations_channel = open_channel(settings.operations_target, ca)
    workspace_channel = open_channel(settings.workspace_target, ca)
    routes = [Route.LOCAL] if router.external is None else [Route.LOCAL, Route.EXTERNAL]
    executor = Executor(
        WorkspaceClient(workspace_channel, caller, stopping=stopping),
        router,
        journal,
        task_timeout_seconds=settings.worker_task_timeout_seconds,
    )
    worker = build_worker(settings, executor, routes)
    _log.info(
        "ai_worker_started",
        task_types=registered_task_types(),
        routes=[route.value for route in routes],
        concurrency=settings.worker_concurrency,
        concurrency_why=startup.why,
        lease_seconds=settings.worker_lease_seconds,
        host_journal=isinstance(journal, HostStoreJournal),
        say=f"ready: {len(registered_task_types())} AI task types on the"
        f" {' and '.join(route.value for route in routes)} route",
    )
    try:
        operations = OperationsClient(operations_channel, caller)
        await operations.check_credential(stopping, settings.worker_poll_seconds)
        await reconcile(journal, operations, stopping, settings.worker_poll_seconds)
        if not stopping.is_set():
            await _run_until(worker, stopping)
    except JournalError as error:
        raise SystemExit(f"opsctl serve ai-worker: {error.message}") from error
    except Unauthenticated as refused:  # the key was taken back while the worker ran
        raise operations.key_refused() from refused
    finally:
        await router.aclose()
        await operations_channel.close()
        await workspace_channel.close()
        journal.close()


async def _run_until(worker: Worker, stopping: asyncio.Event) -> None:
    """Run ``worker`` until ``stopping`` is set (or it stops itself: a journal failure,
    which ``run`` raises once the running attempts are drained)."""
    running = asyncio.create_task(worker.run(stop_on_signals=False))  # ours set ``stopping``
    told = asyncio.create_task(stopping.wait())
    try:
        await asyncio.wait({running, told}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        told.cancel()
        worker.stop()
        await running
