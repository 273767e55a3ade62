"""The pieces that keep a server serving, without a tritonserver: the guard (real processes), exit causes, restart
pauses, the key files, the wording of a lost server and of an address beyond this machine."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import wait_until
from tritonclient.utils import InferenceServerException

from console.clients.failures import GONE, WRONG_PORT, error_message
from console.commands.serve import SERVE_RISK
from console.core.supervisor import RETRIES, pauses
from console.server import TritonServer, guard, keys, logparse, process
from console.server.health import ServerHandle
from console.server.ports import beyond_loopback
from console.server.procs import cmdline, group_members, parent

GUARD = Path(guard.__file__)
CHILD = """\
import sys, threading, time
print(sys.argv[1], flush=True)
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
time.sleep(60)
"""


@contextlib.contextmanager
def guarded(*command: str, secret: str = "") -> Iterator[subprocess.Popen[str]]:
    """The guard running ``command`` in a session of its own, as the console runs it; its lifeline held."""
    read_end, lifeline = os.pipe()
    os.write(lifeline, f"{secret}\n".encode())
    proc = subprocess.Popen([sys.executable, "-I", str(GUARD), str(read_end), "--", *command], pass_fds=(read_end,),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    os.close(read_end)
    try:
        yield proc
    finally:
        os.close(lifeline)  # the console is gone: the guard takes its group down
        proc.wait(30)


def child_of(proc: subprocess.Popen[str]) -> int:
    found: list[int] = []
    wait_until(lambda: found.extend(p for p in group_members(proc.pid) if parent(p) == proc.pid) or found, 10,
               "the guard's child")
    return found[0]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSEGV, signal.SIGTERM])
def test_the_guard_dies_as_its_child_died_without_a_traceback(sig: int) -> None:
    with guarded("sleep", "60") as proc:
        os.kill(child_of(proc), sig)
        proc.wait(30)
        assert proc.returncode == -sig
        assert "Traceback" not in proc.stderr.read()


def test_the_guard_exits_with_its_childs_exit_code() -> None:
    with guarded(sys.executable, "-c", "raise SystemExit(3)") as proc:
        assert proc.wait(30) == 3


def test_the_secret_reaches_the_child_and_leaves_its_command_line() -> None:
    secret = "s3cret-" + os.urandom(8).hex()
    with guarded(sys.executable, "-c", CHILD, guard.SECRET, secret=secret) as proc:
        assert proc.stdout.readline().strip() == secret  # the child was given it
        child = child_of(proc)
        wait_until(lambda: secret not in " ".join(cmdline(child)), 10, "the secret overwritten")
        assert guard.SECRET not in " ".join(cmdline(child)) and len(cmdline(child)) == 4  # its place, its length
        assert secret not in " ".join(cmdline(proc.pid))  # the guard's own arguments never held it


def test_a_server_is_taken_down_once_however_often_it_is_stopped(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # its group id is the guard's pid: once the guard is gone the system may give it to another session (pids wrap
    # at 32768 here within a test run), and a second SIGKILL to it would take down someone else's server
    taken: list[int] = []
    monkeypatch.setattr(process, "take_down", lambda proc, *args: taken.append(proc.pid))
    server = TritonServer(tmp_path)
    with guarded(sys.executable, "-c", CHILD, "x") as proc:
        read_end, server._lifeline = os.pipe()  # as a launch leaves them
        os.close(read_end)
        server._proc = proc  # type: ignore[assignment]
        server.stop(grace=0)
        server.stop(grace=0)
        assert server.stop() == proc.returncode
    assert taken == [proc.pid]


def test_exit_causes_name_the_signal_and_an_aborts_exception() -> None:
    lines = ["I1201 12:00:00.1 1 server.cc:1] \"Started HTTPService at 127.0.0.1:8000\"",
             "terminate called after throwing an instance of 'boost::interprocess::lock_exception'",
             "  what():  boost::interprocess::lock_exception", "Signal (6) received."]
    assert logparse.exit_cause(-6, lines) == ("exited with code -6 (killed by SIGABRT: terminate called after "
                                              "throwing an instance of 'boost::interprocess::lock_exception')")
    assert logparse.exit_cause(-9, lines[:1]) == "exited with code -9 (killed by SIGKILL)"  # not its last line
    assert logparse.exit_cause(-40, []) == "exited with code -40 (killed by signal 40)"
    assert logparse.exit_cause(1, ['E1201 12:00:00.1 1 main.cc:1] "failed to start: bad thing"']) == \
        "exited with code 1 (failed to start: bad thing)"


def test_restarts_pause_longer_each_time() -> None:
    assert pauses() == [1.0, 2.0, 4.0, 8.0, 16.0] and len(pauses()) == RETRIES


def test_addresses_beyond_this_machine_are_warned_in_one_wording() -> None:
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        assert beyond_loopback(host, "the page", ", without a login") is None
    assert beyond_loopback("0.0.0.0", "the page", ", without a login") == \
        "warning: --host 0.0.0.0 serves the page beyond this machine, without a login"
    assert beyond_loopback("192.168.1.5", "x", "") == "warning: --host 192.168.1.5 serves x beyond this machine"


@contextlib.contextmanager
def http_port() -> Iterator[int]:
    """A real HTTP server on a free loopback port."""
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def connections_to(port: int) -> int:
    """How many of this process's open sockets are connected to ``port`` (``/proc/net/tcp``'s remote ports)."""
    rows = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    inodes = {row[9] for row in rows if int(row[2].rpartition(":")[2], 16) == port}
    mine = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # an fd closed meanwhile
            mine.add(os.readlink(f"/proc/self/fd/{fd}").removeprefix("socket:[").removesuffix("]"))
    return len(inodes & mine)


def test_an_http_error_of_the_server_api_holds_its_body_not_its_connection() -> None:
    """A held HTTPError kept its socket open; left in a reference cycle, the socket could be collected first, and
    Python warned of an unclosed socket in whichever test the collector ran."""
    with http_port() as port:
        with pytest.raises(urllib.error.HTTPError) as caught:
            ServerHandle.on("127.0.0.1", port).request("/v2/repository/index", body={})
        assert connections_to(port) == 0
        assert caught.value.code == 501 and b"Unsupported method" in caught.value.read()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_grpc_socket_closed_hints_at_the_http_port_only_where_http_answers() -> None:
    closed = InferenceServerException("Socket closed", status="StatusCode.UNAVAILABLE")
    with http_port() as port:
        assert error_message(closed, f"127.0.0.1:{port}", "grpc").endswith(WRONG_PORT)
    gone = closed_port()  # the server went away during the call: nothing answers there now
    said = error_message(closed, f"127.0.0.1:{gone}", "grpc")
    assert said == f"cannot reach tritonserver at 127.0.0.1:{gone} (gRPC): socket closed{GONE}"
    lost = error_message(closed, "127.0.0.1:8001", "grpc", lost=True)  # a stream that had answered: no port hint
    assert lost == f"lost the connection to tritonserver at 127.0.0.1:8001 (gRPC): socket closed{GONE}"
    assert "restarting" in GONE and "HTTP port" not in lost


def test_key_files_are_this_users_alone_and_go_with_their_server(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QAIC_CONSOLE_CACHE", str(tmp_path))
    me = os.getpgrp()  # a live process group stands for the server
    keys.remember(8123, "k1", me)
    assert keys.key_for("127.0.0.1:8123") == "k1" and keys.key_for("localhost:8123") == "k1"
    assert keys.key_for("192.168.1.5:8123") == "" and keys.key_for("127.0.0.1:8124") == ""  # never elsewhere
    path = keys.folder() / "8123"
    assert path.stat().st_mode & 0o777 == 0o600 and keys.folder().stat().st_mode & 0o777 == 0o700
    path.chmod(0o644)  # readable by others: not trusted
    assert keys.key_for("127.0.0.1:8123") == ""
    path.chmod(0o600)
    keys.forget(8123, me + 1)  # another server's forget leaves it
    assert keys.key_for("127.0.0.1:8123") == "k1"
    dead = subprocess.Popen(["true"], start_new_session=True)
    dead.wait()
    left = keys.folder() / "8125"  # a key its console never forgot (killed), of a server that is gone
    left.write_text(json.dumps({"pid": dead.pid, "key": "k2"}))
    left.chmod(0o600)
    assert keys.key_for("127.0.0.1:8125") == ""  # not sent
    keys.remember(8126, "k3", me)  # and the next server remembered sweeps it away
    assert not left.exists() and keys.key_for("127.0.0.1:8126") == "k3" and path.exists()
    keys.forget(8123, me)
    assert not path.exists()


@pytest.mark.parametrize("host", ["0.0.0.0", "127.0.0.1"])
def test_serve_beyond_loopback_warns_before_it_starts(host: str, tmp_path: Path) -> None:
    from helpers import cli

    result = cli("serve", "--model-repository", str(tmp_path), "--host", host, "--tritonserver", str(tmp_path / "no"))
    assert result.exit_code == 1 and "is not an executable tritonserver" in result.stderr
    warned = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    if host == "127.0.0.1":
        assert not warned
    else:
        assert warned == [beyond_loopback(host, "tritonserver's HTTP, gRPC and metrics ports", SERVE_RISK)]
        assert "beyond this machine" in warned[0] and "repository API stays this console's" in warned[0]
