"""Free loopback ports for processes the tests start.

Drawn below the kernel's ephemeral range (32768-60999 here), so no outgoing
connection can take a port between the draw and the child's bind, and never
the same one twice in a session.

``refusing_port`` is a port where a connection is always refused: the two
test processes draw from the same range, so a port that is merely free now
may be another process's server a moment later. ``unanswered_port`` is one where
a connection is never made, nor refused: it hangs, as towards a host that is off.
"""

from __future__ import annotations

import random
import socket
import time

PORTS = range(12000, 20000)  # clear of MariaDB, PostgreSQL, Redis and the Galera tests' ports
_handed_out: set[int] = set()
_held: list[socket.socket] = []


def free_port(within: range = PORTS) -> int:
    """A loopback port of ``within`` nothing listens on, never handed out twice here."""
    for _ in range(200):
        port = random.choice(within)
        if port in _handed_out:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port in {within.start}-{within.stop - 1}")


def refusing_port() -> int:
    """A port held bound but not listening for the rest of the session: connects are refused.

    Without SO_REUSEADDR on the held socket no other socket can bind the port,
    so no server of another test can appear behind it.
    """
    for _ in range(200):
        port = random.choice(PORTS)
        if port in _handed_out:
            continue
        sock = socket.socket()
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            sock.close()
            continue
        _handed_out.add(port)
        _held.append(sock)
        return port
    raise AssertionError(f"no free port in {PORTS.start}-{PORTS.stop - 1}")


def unanswered_port() -> int:
    """A loopback port where a connect hangs until the caller gives up: neither made nor
    refused, as towards a model host that is off or drops our packets.

    A socket listens there with the shortest queue and never accepts; a few connects fill
    the queue, after which the kernel drops each new one's SYN and the connecting side
    waits for an answer. Held for the rest of the session, like ``refusing_port``.
    """
    server = socket.socket()
    server.bind(("127.0.0.1", free_port()))
    server.listen(0)
    port = int(server.getsockname()[1])
    _held.append(server)
    for _ in range(16):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(("127.0.0.1", port))
        _held.append(filler)
        time.sleep(0.02)  # its handshake lands in the queue (or is dropped, once it is full)
        if not _connects(port):
            return port
    raise AssertionError(f"connects to 127.0.0.1:{port} were still made with its queue full")


def _connects(port: int) -> bool:
    """Whether a connect to ``port`` is made (or refused) within a short wait."""
    with socket.socket() as probe:
        probe.settimeout(0.2)
        try:
            probe.connect(("127.0.0.1", port))
        except TimeoutError:
            return False
        except OSError:
            return True
        return True
