"""Free TCP ports, picked the way tritonserver binds them."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port free right now on all interfaces."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports (all held open together while picking)."""
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("", 0))
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


def port_in_use(port: int) -> bool:
    """True when something already binds/listens on ``port`` (tested the way the server binds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
        except OSError:
            return True
    return False
