"""The AI worker (seed 000, ``AiOperationWorker``), built on the worker SDK.

    main        the process: idle unless enabled, signals, wiring; a ``durable_ops.worker``
                ``Worker`` (claims by priority and route, concurrency, leases, settling,
                draining on stop) with a handler per AI task type
    execution   one attempt: the host journal and trace around it (an SDK
                interceptor), re-checks, handler, inference, publish under the lease
    failures    the pure table from an error to retry, fail or fallback
    clients     the gRPC calls to Workspace (and Operations' owner view), errors made typed
    journal     the host-local journal of attempts (durable_ops.hoststore)
    reconcile   settling a previous worker's unfinished attempts on start

Task handlers live in ``durable_ops.ai_worker.handlers``; model routes in
``durable_ops.ai_worker.inference``.
"""
