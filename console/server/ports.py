"""Free TCP ports, picked the way tritonserver binds them."""

from __future__ import annotations

import socket

from .stale import find_servers


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


def port_taken(port: int) -> str | None:
    """None when ``port`` is free, else one line saying so (naming the tritonserver that holds it, if one does)."""
    if not port_in_use(port):
        return None
    holders = find_servers(ports=[port])
    return f"port {port} is in use" + (f" by {holders[0].describe()}" if holders else "")
