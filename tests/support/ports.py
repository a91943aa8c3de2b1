"""Free loopback ports for processes the tests start.

Drawn below the kernel's ephemeral range (32768-60999 here), so no outgoing
connection can take a port between the draw and the child's bind, and never
the same one twice in a session.
"""

from __future__ import annotations

import random
import socket

PORTS = range(12000, 20000)  # clear of MariaDB, PostgreSQL, Redis and the Galera tests' ports
_handed_out: set[int] = set()


def free_port() -> int:
    for _ in range(200):
        port = random.choice(PORTS)
        if port in _handed_out:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise AssertionError(f"no free port in {PORTS.start}-{PORTS.stop - 1}")
