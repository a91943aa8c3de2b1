"""Pure rules of durable-ops: standard library only, no I/O, ``now`` passed in.

Everything that decides (states and transitions, bounds, backoff, lease expiry,
routing, notification wording, the task and subject-kind registries) lives here so it can be
tested without a database and imported by every other layer.
"""
