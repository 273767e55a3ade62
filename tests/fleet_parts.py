"""A fleet on one machine for the tests: Debian's haproxy in front of several tritonservers (HTTP, and gRPC over
HTTP/2 with ``proto h2``; health checks on /v2/health/ready) and Debian's Prometheus scraping them, each started
on free loopback ports with a config written here, and stopped by the caller."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import yaml
from helpers import consecutive_ports

from console.fleet.rules import RULES_FILE
from console.server import free_port

CHECK_MS = 300  # haproxy's health-check interval


def binary(name: str) -> str:
    found = shutil.which(name) or (f"/usr/sbin/{name}" if Path(f"/usr/sbin/{name}").is_file() else None)
    assert found, f"{name} not found: Debian's {name} package has it (scripts/setup.sh --test installs it)"
    return found


def neighbour_ports() -> int:
    """A free port whose next one is free too (Triton's layout: gRPC = HTTP + 1, which the console guesses)."""
    return consecutive_ports(2)


def haproxy_config(http: int, stats: int, servers: Sequence[tuple[str, str]]) -> str:
    """``servers``: (HTTP host:port, gRPC host:port) of each tritonserver; gRPC listens on ``http + 1``."""
    lines = ["global", "  maxconn 256", "  log stdout format raw local0 info", "defaults", "  mode http",
             "  log global", "  option httplog", "  timeout connect 5s", "  timeout client 300s",
             "  timeout server 300s", "  retries 3", "  option redispatch",  # a refused connection goes elsewhere
             "frontend http", f"  bind 127.0.0.1:{http}", "  default_backend triton_http",
             "frontend grpc", f"  bind 127.0.0.1:{http + 1} proto h2", "  default_backend triton_grpc",
             "frontend stats", f"  bind 127.0.0.1:{stats}", "  stats enable", "  stats uri /stats"]
    for backend, proto in (("triton_http", ""), ("triton_grpc", " proto h2")):
        lines += [f"backend {backend}", "  balance roundrobin", "  option httpchk GET /v2/health/ready",
                  "  http-check expect status 200", f"  default-server inter {CHECK_MS}ms fall 2 rise 2"]
        for i, (http_url, grpc_url) in enumerate(servers):
            address = grpc_url if proto else http_url
            lines.append(f"  server t{i} {address}{proto} check port {http_url.rsplit(':', 1)[1]} check-proto h1")
    return "\n".join(lines) + "\n"


class Process:
    """A helper process with its output in a file; stopped by :meth:`stop`."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.log = log
        self._out = log.open("w")
        self.proc = subprocess.Popen(args, stdout=self._out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
        self._out.close()


class Haproxy(Process):
    def __init__(self, folder: Path, servers: Sequence[tuple[str, str]]) -> None:
        self.http, self.stats = neighbour_ports(), free_port()
        config = folder / "haproxy.cfg"
        config.write_text(haproxy_config(self.http, self.stats, servers))
        checked = subprocess.run([binary("haproxy"), "-c", "-f", str(config)], capture_output=True, text=True,
                                 timeout=30, check=False)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        super().__init__([binary("haproxy"), "-db", "-f", str(config)], folder / "haproxy.log")
        self.http_url, self.grpc_url = f"127.0.0.1:{self.http}", f"127.0.0.1:{self.http + 1}"

    def states(self) -> dict[tuple[str, str], str]:
        """(backend, server) -> haproxy's status of it (UP, DOWN, ...), from its stats page's CSV."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.stats}/stats;csv", timeout=5) as answer:
            text = answer.read().decode().lstrip("# ")
        return {(row["pxname"], row["svname"]): row["status"] for row in csv.DictReader(io.StringIO(text))
                if row["svname"] not in ("FRONTEND", "BACKEND")}


class Prometheus(Process):
    def __init__(self, folder: Path, targets: Sequence[str]) -> None:
        self.port = free_port()
        config = folder / "prometheus.yml"
        config.write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(RULES_FILE)],
            "scrape_configs": [{"job_name": "qaic", "static_configs": [{"targets": list(targets)}]}]}))
        super().__init__([binary("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={folder / 'tsdb'}",
                          f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1h"],
                         folder / "prometheus.log")
        self.url = f"http://127.0.0.1:{self.port}"

    def targets(self) -> str:
        """Each scrape target's health and last error, as Prometheus's targets page says them."""
        with urllib.request.urlopen(f"{self.url}/api/v1/targets", timeout=5) as answer:
            active = json.load(answer)["data"]["activeTargets"]
        return "targets: " + ", ".join(f"{t['scrapeUrl']} {t['health']} {t['lastError']!r}" for t in active)

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                return answer.status == 200
        except OSError:
            assert self.proc.poll() is None, self.log.read_text()[-2000:]
            return False

