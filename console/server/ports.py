"""Free TCP ports, picked the way tritonserver binds them; the tritonserver of this machine at an address; the warning
for listening beyond this machine."""

from __future__ import annotations

import ipaddress
import socket

from .stale import RunningServer, find_servers


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


def is_loopback(host: str) -> bool:
    """Whether ``host`` is an address of this machine only (127.0.0.0/8, ::1, localhost)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def beyond_loopback(host: str, what: str, risk: str) -> str | None:
    """The one warning for ``what`` listening on ``host`` beyond this machine (None on loopback): ``risk`` says
    what whoever reaches it can do."""
    return None if is_loopback(host) else f"warning: --host {host} serves {what} beyond this machine{risk}"


def listening_at(http_url: str) -> RunningServer | None:
    """The tritonserver of this machine whose HTTP endpoint is ``http_url`` (a loopback ``host:port``), when its
    command line names that port."""
    host, _, port = http_url.rpartition(":")
    if not port.isdigit() or not is_loopback(host.strip("[]")):
        return None
    return next((s for s in find_servers(ports=[int(port)]) if s.http_url.rpartition(":")[2] == port), None)
