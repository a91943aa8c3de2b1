"""The AI worker (seed 000, ``AiOperationWorker``).

    main        the process: idle unless enabled, signals, wiring
    loop        neutral-scope claims by priority and route, concurrency, draining on stop
    execution   one claimed operation: heartbeat stream, re-checks, handler, inference,
                publish, complete / fail / fallback / acknowledge
    lease       the heartbeat stream that holds (or loses) the lease
    failures    the pure table from an error to retry, fail or fallback
    clients     the gRPC calls to Operations and Workspace, errors made typed
    claims      the claimed operation as the worker holds it
    journal     the host-local journal of attempts (durable_ops.hoststore)
    reconcile   settling a previous worker's unfinished attempts on start

Task handlers live in ``durable_ops.ai_worker.handlers``; model routes in
``durable_ops.ai_worker.inference``.
"""
