"""A fleet on one machine: three real tritonservers (each loading one embedded sample) behind Debian's haproxy
(HTTP, and gRPC over HTTP/2), scraped by a real Prometheus (Debian's, loading the shipped rules). The bench, the
console and the OpenAI front work through the balancer unchanged; the fleet view reads Prometheus; a killed
server is dropped by haproxy's health check and named by the fleet view."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fleet_parts import Haproxy, Prometheus
from helpers import cli, json_rows, tritonserver_pid, wait_until

from console.fleet.query import Prometheus as PrometheusAPI
from console.fleet.watch import watcher
from console.metrics import rows, scrape
from console.server import TritonServer

MODEL = "smollm2_decoupled"
SERVERS = 3
WAIT = 120.0
CONSOLE = str(Path(sys.executable).with_name("qaic-console"))


@dataclass
class Fleet:
    servers: list[TritonServer]
    haproxy: Haproxy
    prometheus: Prometheus

    def counts(self, family: str) -> list[float]:
        """Each server's own count of ``family`` for the model, from its own metrics page (0: it is gone)."""
        out = []
        for server in self.servers:
            try:
                out.append(scrape(server.handle.metrics_url).value(family, MODEL) or 0.0)
            except Exception:  # a killed server's page: nothing more is counted there
                out.append(float("nan"))
        return out


@pytest.fixture(scope="module")
def fleet(embedded_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    folder = tmp_path_factory.mktemp("fleet")
    servers = [TritonServer(embedded_repo, models=(MODEL,)) for _ in range(SERVERS)]
    failures: list[BaseException] = []

    def start(server: TritonServer) -> None:
        try:
            server.start(timeout=300)
        except BaseException as exc:  # said below, in the test's thread
            failures.append(exc)

    threads = [threading.Thread(target=start, args=(s,)) for s in servers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    haproxy = prometheus = None
    try:
        assert not failures, failures
        haproxy = Haproxy(folder, [(s.http_url, s.grpc_url) for s in servers])
        prometheus = Prometheus(folder, [s.handle.metrics_url.split("//", 1)[1].split("/", 1)[0] for s in servers])
        wait_until(prometheus.ready, WAIT, "Prometheus to be ready")
        api = PrometheusAPI(prometheus.url)
        wait_until(lambda: len([s for s in api.query("up == 1")]) == SERVERS, WAIT, "Prometheus to scrape all three",
                   prometheus.targets)
        wait_until(lambda: set(haproxy.states().values()) == {"UP"}, WAIT, "haproxy to see every server UP")
        yield Fleet(servers, haproxy, prometheus)
    finally:
        for part in (haproxy, prometheus):
            if part is not None:
                part.stop()
        for server in servers:
            server.stop()


def bench(fleet: Fleet, out: Path, *args: str) -> tuple[int, dict, str]:
    """``qaic-console bench`` through haproxy's gRPC port (a process of its own), reading Prometheus."""
    done = subprocess.run([CONSOLE, "bench", "--url", fleet.haproxy.grpc_url,
                           "--model", MODEL, "--prometheus", fleet.prometheus.url, "--warmup", "0",
                           "--input-tokens-mean", "8", "--output-tokens-mean", "12", "--plots", "none", "-q",
                           "-o", str(out), *args], capture_output=True, text=True, timeout=300, check=False)
    assert (out / "bench.json").is_file(), done.stdout + done.stderr
    return done.returncode, json.loads((out / "bench.json").read_text()), done.stdout + done.stderr


def fleet_view(fleet: Fleet, window: str = "30s") -> dict:
    done = subprocess.run([CONSOLE, "metrics", "--prometheus", fleet.prometheus.url,
                           "--window", window, "--json"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_the_bench_through_haproxy_spreads_over_all_three_and_prometheus_sums_them(fleet: Fleet,
                                                                                  tmp_path: Path) -> None:
    requests_before = fleet.counts("nv_inference_request_success")
    tokens_before = fleet.counts("qaic_generation_tokens")
    code, document, said = bench(fleet, tmp_path / "run", "--concurrency", "3", "--requests", "12")
    assert code == 0, said
    (level,) = document["levels"]
    assert level["request_count"] == 12 and level["error_count"] == 0
    wait_until(lambda: sum(fleet.counts("nv_inference_request_success")) - sum(requests_before) >= 12, 30,
               "the servers to count the bench's requests")
    spread = [a - b for a, b in zip(fleet.counts("nv_inference_request_success"), requests_before)]
    assert all(n > 0 for n in spread) and sum(spread) == 12, spread
    tokens = sum(a - b for a, b in zip(fleet.counts("qaic_generation_tokens"), tokens_before))
    server = level["server"]
    assert server["note"].startswith(f"metrics: Prometheus {fleet.prometheus.url}"), server["note"]
    own = tokens / level["duration_s"]  # the three servers' own counts over the level's time
    print(f"requests per server {spread}; tokens/s: Prometheus {server['tokens_per_s']}, the servers' own "
          f"{own:.3f} ({tokens:g} tokens over {level['duration_s']} s)")  # shown with pytest -rP
    assert server["tokens_per_s"] == pytest.approx(own, rel=0.10), (server, tokens, own)
    assert len(server["instances"]) == SERVERS and server["down"] == []
    view = fleet_view(fleet)
    instances = view["instances"][MODEL]
    assert sorted(instances) == sorted(s.handle.metrics_url.split("//", 1)[1].split("/", 1)[0]
                                       for s in fleet.servers)
    assert view["models"][MODEL]["tokens_per_s"] == pytest.approx(sum(v["tokens_per_s"] or 0.0
                                                                      for v in instances.values()), rel=0.01)
    assert view["down"] == []
    shown = [row[0] for row in rows(watcher(fleet.prometheus.url).look().figures)]  # what the TUI and web show
    assert MODEL in shown and sum(label.startswith(f"{MODEL} @ 127.0.0.1:") for label in shown) == SERVERS, shown


def test_the_console_and_the_front_answer_through_haproxy(fleet: Fleet) -> None:
    from openai import OpenAI

    from console.front import front_server
    from console.server import free_port

    for url in (fleet.haproxy.http_url, fleet.haproxy.grpc_url):  # Triton's layout: either endpoint, unchanged
        (row,) = json_rows(cli("--url", url, "--model", MODEL, "--prompt", "Say hi.", "--max-tokens", "4", "--json",
                               "-q"))
        assert row["text"], row
    front = front_server(fleet.haproxy.grpc_url, "127.0.0.1", free_port(), None, ())
    front.start()
    try:
        client = OpenAI(base_url=front.base_url, api_key="none", max_retries=0, timeout=60)
        reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}],
                                               max_tokens=4)
        assert reply.choices[0].message.content
    finally:
        front.stop()


def test_a_killed_server_is_dropped_by_the_health_check_and_named_by_the_fleet_view(fleet: Fleet,
                                                                                     tmp_path: Path) -> None:
    victim = fleet.servers[-1]
    target = victim.handle.metrics_url.split("//", 1)[1].split("/", 1)[0]
    before = fleet.counts("nv_inference_request_success")
    outcome: dict[str, tuple[int, dict, str]] = {}
    load = threading.Thread(target=lambda: outcome.setdefault("run", bench(
        fleet, tmp_path / "killed", "--concurrency", "3", "--duration", "12")))
    load.start()
    try:  # mid-run: once the victim has answered some of this run's requests
        wait_until(lambda: fleet.counts("nv_inference_request_success")[-1] > before[-1] + 1, 60,
                   "the victim to answer the run's requests")
        os.kill(tritonserver_pid(victim), signal.SIGKILL)
        wait_until(lambda: {s for (b, n), s in fleet.haproxy.states().items() if n == f"t{SERVERS - 1}"} == {"DOWN"},
                   30, "haproxy's health check to drop the killed server")
    finally:
        load.join(timeout=300)
    code, document, said = outcome["run"]
    (level,) = document["levels"]
    assert level["request_count"] > level["error_count"], said
    assert level["error_count"] <= 3, said  # at most the streams in flight on the killed server
    print(f"killed mid-run: {level['request_count']} requests answered, {level['error_count']} failed")
    # after the health check dropped it, every request goes to the two left, and succeeds
    code, document, said = bench(fleet, tmp_path / "after", "--concurrency", "2", "--requests", "6")
    assert code == 0 and document["levels"][0]["error_count"] == 0, said
    wait_until(lambda: target in fleet_view(fleet)["down"], 30, "the fleet view to name the missing server")
    server = document["levels"][0]["server"]
    assert target in server["down"] and f"down (up == 0): {target}" in server["note"], server
