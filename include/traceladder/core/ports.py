"""Free local TCP ports for the services the stack, the tests and the proxy's ranks start.

A port from ``bind(port 0)`` lies in the kernel's ephemeral range, the same range it hands to every
outgoing connection. Between picking such a port and the service binding it, a client connecting
to Redis, PostgreSQL or S3 can take it as its local port, and the service then dies with "address
already in use" (seen in CI: the api-server of the Celery stack). So ports are drawn at random
from below the ephemeral range, where the kernel never puts a client, and checked free.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path
from typing import Sequence

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 20000  # above the well-known and registered ports services ship with
ATTEMPTS = 2000


def _ephemeral_low() -> int:
    try:
        return int(EPHEMERAL_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def free_ports(count: int, host: str = "127.0.0.1", exclude: Sequence[int] = ()) -> list[int]:
    """``count`` distinct ports below the ephemeral range that are free on ``host`` right now."""
    high = _ephemeral_low()
    low = LOWEST_PORT if high - LOWEST_PORT >= 1000 else 1024
    picked: list[int] = []
    for _ in range(ATTEMPTS):
        port = random.randrange(low, high)  # noqa: S311 (a port, not a secret)
        if port not in exclude and port not in picked and port_free(port, host):
            picked.append(port)
            if len(picked) == count:
                return picked
    raise OSError(f"no {count} free TCP ports on {host} in {low}-{high - 1} after {ATTEMPTS} tries")


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(1, host)[0]
