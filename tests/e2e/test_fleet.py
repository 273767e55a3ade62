"""A fleet on one machine: three real tritonservers (each loading one embedded sample) behind Debian's haproxy
(HTTP, and gRPC over HTTP/2), scraped by a real Prometheus (Debian's, loading the shipped rules). The bench, the
console and the OpenAI front work through the balancer unchanged; the fleet view reads Prometheus; a killed
server is dropped by haproxy's health check and named by the fleet view.

And one pod of ``deploy k8s`` run here: its containers' commands as written, the Secret's keys in their
environment, ``$(VAR)`` expanded as Kubernetes does (only the places change: binary, repository, loopback
addresses and free ports): tritonserver's administrative APIs and the front answer only callers with the keys, and
a stop (SIGTERM, as the kubelet sends after the preStop) lets a stream in flight finish."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from fleet_parts import Haproxy, Prometheus
from helpers import SERVER_START, cli, json_rows, tritonserver_pid, wait_until

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


# --------------------------------------------------------------------------- one pod of deploy k8s, run here

KUBERNETES_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
PLACES = ("--model-repository", "--http-port", "--grpc-port", "--metrics-port", "--url", "--grpc-url",
          "--metrics-url", "--host", "--port")  # where a process runs: the only values changed here


def expand(text: str, env: dict[str, str]) -> str:
    """``$(VAR)`` replaced by VAR's value where the container defines it, ``$$`` by ``$``, as Kubernetes does."""
    return KUBERNETES_REFERENCE.sub(lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


def container_command(container: dict[str, Any], secret: dict[str, str], places: dict[str, str]) -> tuple[
        list[str], dict[str, str]]:
    """The container's command as its process would get it (the Secret's keys in its environment, expanded), its
    ``places`` changed (both ``--flag=value`` and ``--flag value``), and the environment it adds."""
    env = {e["name"]: secret[e["valueFrom"]["secretKeyRef"]["key"]] for e in container["env"] if "valueFrom" in e}
    command = [expand(arg, env) for arg in container["command"]]
    out: list[str] = []
    for arg in command:
        name = arg.split("=", 1)[0]
        if "=" in arg and name in places:
            out.append(f"{name}={places[name]}")
        elif out and out[-1] in places and "=" not in out[-1] and not arg.startswith("--"):
            out.append(places[out[-1]])
        else:
            out.append(arg)
    return out, env


def status(url: str, method: str = "GET", headers: dict[str, str] | None = None, body: bytes | None = None) -> int:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


@pytest.fixture(scope="module")
def pod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The tritonserver and front processes of one pod of ``deploy k8s`` on the embedded streaming sample."""
    from console.server import free_ports
    from console.server.locate import backend_directory, find_tritonserver, server_env
    from repo_gen.samples import write_samples

    folder = tmp_path_factory.mktemp("pod")
    write_samples((MODEL,), folder / "repo")
    said = cli("deploy", "k8s", str(folder / "repo"), "-o", str(folder / "k8s"))
    assert said.exit_code == 0, said.output
    written = {f: yaml.safe_load((folder / "k8s" / f).read_text()) for f in ("deployment.yaml", "secret.yaml")}
    secret = written["secret.yaml"]["stringData"]
    triton, front = written["deployment.yaml"]["spec"]["template"]["spec"]["containers"]
    http, grpc, metrics, openai = free_ports(4)
    binary = find_tritonserver()
    server_args, server_adds = container_command(triton, secret, {
        "--model-repository": str(folder / "repo"), "--http-port": str(http), "--grpc-port": str(grpc),
        "--metrics-port": str(metrics)})
    assert server_args[0] == "tritonserver"
    backend_dir = backend_directory(binary)
    here = [f"--{api}-address=127.0.0.1" for api in ("http", "grpc", "metrics")]
    here += [f"--backend-directory={backend_dir}"] if backend_dir else []
    front_args, front_adds = container_command(front, secret, {
        "--url": f"127.0.0.1:{http}", "--grpc-url": f"127.0.0.1:{grpc}", "--metrics-url": f"127.0.0.1:{metrics}",
        "--host": "127.0.0.1", "--port": str(openai)})
    assert front_args[0] == "qaic-console"
    logs = folder / "logs"
    logs.mkdir()
    processes: dict[str, subprocess.Popen[bytes]] = {}
    try:
        processes["tritonserver"] = subprocess.Popen(
            [str(binary), *server_args[1:], *here], env=server_env(binary, server_adds), start_new_session=True,
            stdin=subprocess.DEVNULL, stdout=(logs / "tritonserver").open("wb"), stderr=subprocess.STDOUT)
        wait_until(lambda: status(f"http://127.0.0.1:{http}/v2/health/ready") == 200, SERVER_START,
                   "the pod's tritonserver to be ready", lambda: (logs / "tritonserver").read_text()[-2000:])
        processes["front"] = subprocess.Popen(
            [CONSOLE, *front_args[1:]], env={**os.environ, **front_adds}, start_new_session=True,
            stdin=subprocess.DEVNULL, stdout=(logs / "front").open("wb"), stderr=subprocess.STDOUT)
        wait_until(lambda: status(f"http://127.0.0.1:{openai}/health") == 200, 120, "the pod's front to answer",
                   lambda: (logs / "front").read_text()[-2000:])
        yield {"keys": secret, "http": http, "grpc": grpc, "openai": openai, "processes": processes, "logs": logs,
               "args": server_args, "container": triton["command"],
               "limits": {"tritonserver": triton["resources"]["limits"], "front": front["resources"]["limits"]}}
    finally:
        for process in processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)


ADMIN = (("GET", "/v2/systemsharedmemory/status"), ("GET", "/v2/logging"), ("POST", "/v2/repository/index"),
         ("POST", "/v2/systemsharedmemory/region/r/unregister"))
TOKENS = 64


def test_the_pods_tritonserver_answers_its_administrative_apis_only_with_the_key(pod: dict[str, Any]) -> None:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    from console.server.health import KEY_HEADER

    key = pod["keys"]["triton-key"]
    assert "$(QAIC_CONSOLE_TRITON_KEY)" in " ".join(pod["container"]) and f"{KEY_HEADER}={key}" in pod["args"][-2]
    for method, path in ADMIN:
        url = f"http://127.0.0.1:{pod['http']}{path}"
        body = b"{}" if method == "POST" else None
        assert status(url, method, body=body) == 403, path
        assert status(url, method, {KEY_HEADER: key[::-1]}, body) == 403, path
        assert status(url, method, {KEY_HEADER: key}, body) == 200, path
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{pod['grpc']}")
    for call in (client.get_system_shared_memory_status, client.get_log_settings, client.get_model_repository_index):
        with pytest.raises(InferenceServerException, match="This protocol is restricted"):
            call()
        assert call(headers={f"triton-grpc-protocol-{KEY_HEADER}": key}) is not None
    client.close()


def test_the_pods_front_refuses_a_request_without_the_key(pod: dict[str, Any]) -> None:
    url = f"http://127.0.0.1:{pod['openai']}/v1/models"
    assert status(url) == 401
    assert status(url, headers={"Authorization": f"Bearer {pod['keys']['triton-key']}"}) == 401
    assert status(url, headers={"Authorization": f"Bearer {pod['keys']['api-key']}"}) == 200


def resident(pids: list[int]) -> int:
    """Bytes resident in memory of ``pids`` (VmRSS)."""
    lines = [line for pid in pids for line in Path(f"/proc/{pid}/status").read_text().splitlines()]
    return sum(int(line.split()[1]) * 1024 for line in lines if line.startswith("VmRSS:"))


def test_the_pods_processes_fit_in_the_memory_it_asks_for(pod: dict[str, Any]) -> None:
    """After a chat (its model, tokenizer and chat template loaded): tritonserver and its stubs, and the front."""
    from openai import OpenAI

    from console.server.procs import group_members

    client = OpenAI(base_url=f"http://127.0.0.1:{pod['openai']}/v1", api_key=pod["keys"]["api-key"], max_retries=0,
                    timeout=300)
    reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=8)
    assert reply.choices[0].message.content
    for name, process in pod["processes"].items():
        used, limit = resident(group_members(process.pid)), pod["limits"][name]["memory"]
        print(f"{name}: {used / 2**20:.0f} MiB resident of its {limit}")  # shown with pytest -rP
        assert limit.endswith("Mi") and used < int(limit[:-2]) * 2**20, (name, used, limit)


def exiting(grpc_port: int) -> bool:
    """Whether tritonserver answers gRPC with UNAVAILABLE "Server exiting" (new requests refused)."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    try:
        client.is_server_ready()
    except InferenceServerException as exc:
        return "Server exiting" in str(exc)
    finally:
        client.close()
    return False


def test_a_stopped_pod_admits_nothing_new_and_finishes_the_stream_in_flight(pod: dict[str, Any]) -> None:
    """SIGTERM to each container's process, as the kubelet sends after the preStop, mid-stream (last: it stops the
    pod)."""
    from openai import OpenAI

    client = OpenAI(base_url=f"http://127.0.0.1:{pod['openai']}/v1", api_key=pod["keys"]["api-key"], max_retries=0,
                    timeout=300)
    stream = iter(client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Tell me a story."}], max_tokens=TOKENS, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
    before = []
    while not any(c.choices and c.choices[0].delta.content for c in before):
        before.append(next(stream))
    for process in pod["processes"].values():
        process.send_signal(signal.SIGTERM)
    wait_until(lambda: status(f"http://127.0.0.1:{pod['openai']}/health") == 0, 60, "the front to stop listening")
    wait_until(lambda: exiting(pod["grpc"]), 60, "tritonserver to say it is exiting")
    assert status(f"http://127.0.0.1:{pod['http']}/v2/health/ready") == 0  # its HTTP endpoint takes no connection
    after = list(stream)
    assert [c.choices[0].finish_reason for c in after if c.choices][-1] == "length"
    assert after[-1].usage is not None and after[-1].usage.completion_tokens == TOKENS
    assert sum(bool(c.choices and c.choices[0].delta.content) for c in after) >= TOKENS // 2, "not stopped mid-stream"
    for name, process in pod["processes"].items():  # each one done: tritonserver exits 0, the front as SIGTERM's
        assert process.wait(120) in (0, 128 + signal.SIGTERM), (name, (pod["logs"] / name).read_text()[-2000:])
