"""Shared fixtures; the session checks at its end that no tritonserver, backend stub, llama.cpp or vLLM server it
started is left, and that pytest-textual-snapshot's records can be read. ``tests/peers`` (real vLLM and
llama-server, ``make test-peers``) is collected only with ``--peers``."""

from __future__ import annotations

import inspect
import os
import pickle
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fake_server import FakeServer, registered
from helpers import SERVER_START, SESSION_MARK, LlamaServer, computed_key, kept, marked_servers, remove_shared

ECHO_CONFIG = """\
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

ECHO_MODEL = """\
import os
import sys

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return responses

    def finalize(self):
        marker = os.environ.get("ECHO_FINALIZE_MARKER")
        if marker:
            with open(marker, "w") as f:
                f.write(sys.prefix)
"""

LLM_CONFIG = ECHO_CONFIG.replace('"INPUT0" data_type: TYPE_FP32', '"prompt" data_type: TYPE_STRING').replace(
    '"OUTPUT0" data_type: TYPE_FP32', '"text_output" data_type: TYPE_STRING')  # the consoles' LLM interface

WriteModel = Callable[..., Path]


def write_python_model(repo: Path, name: str, model_py: str, llm: bool = False) -> Path:
    """Write a Python-backend FP32 echo-shaped model ``name`` with ``model_py`` as ``1/model.py``.

    ``llm``: STRING ``prompt`` -> ``text_output`` instead (the interface the consoles speak, no controls).
    """
    folder = repo / name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(LLM_CONFIG if llm else ECHO_CONFIG)
    (folder / "1" / "model.py").write_text(textwrap.dedent(model_py))
    return folder


@pytest.fixture(scope="session")
def python_model() -> WriteModel:
    """The writer: ``python_model(repo, name, model_py) -> model dir``."""
    return write_python_model


@pytest.fixture(scope="session")
def echo_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository with one Python-backend model, ``echo`` (FP32 INPUT0 -> OUTPUT0).

    Its ``finalize`` writes the stub's ``sys.prefix`` to ``$ECHO_FINALIZE_MARKER`` when set.
    """
    repo = tmp_path_factory.mktemp("echo_repo")
    write_python_model(repo, "echo", ECHO_MODEL)
    return repo


@pytest.fixture(scope="session")
def embedded_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository with the embedded SmolLM2 samples, written by the repo generator."""
    from repo_gen.samples import EMBEDDED_SAMPLES, write_samples

    repo = tmp_path_factory.mktemp("llm_model_dir")
    write_samples(EMBEDDED_SAMPLES, repo)
    return repo


@pytest.fixture(scope="session")
def lora_folders() -> dict[str, Path]:
    """Two tiny real LoRA adapters (A, B) of the embedded model (tests/lora_adapters.py), trained once and kept in
    the console's cache under a key of the weights, the training code and peft's version (``kept``)."""
    from importlib.metadata import version

    import lora_adapters

    from backend_model.models import prepare_embedded

    key = computed_key(prepare_embedded(progress=lambda message: None).name, inspect.getsource(lora_adapters),
                       version("peft"))
    return lora_adapters.make_adapters(kept("lora-adapters", key, lora_adapters.make_adapters))


_SHARED_SERVERS: list = []  # this worker's session-wide tritonservers, checked after every test


@pytest.fixture(scope="session")
def embedded_server(embedded_repo: Path):
    """One real tritonserver serving the embedded samples for the whole session, on ports picked once (a restart
    after it died keeps them, so fronts and clients made before still reach it)."""
    from console.server import TritonServer, free_ports

    http, grpc, metrics = free_ports(3)
    server = TritonServer(embedded_repo, http_port=http, grpc_port=grpc, metrics_port=metrics)
    server.start(timeout=SERVER_START)
    _SHARED_SERVERS.append(server)
    yield server
    _SHARED_SERVERS.remove(server)
    server.stop()


@pytest.fixture(autouse=True)
def _shared_servers_outlive_each_test() -> Iterator[None]:
    """A session-wide server that ended during a test fails that test, with how it ended and its log's last lines,
    and starts again for the tests after it (they would all fail on a refused connection, naming nothing)."""
    yield
    for server in _SHARED_SERVERS:
        if not server.running:
            cause, tail = server.exit_cause(), server.log_tail(30)
            server.stop(grace=0)
            server.start(timeout=SERVER_START)
            pytest.fail(f"the session's tritonserver ended during this test, {cause}; started again for the next "
                        "tests. Its log's last lines:\n" + "\n".join(tail), pytrace=False)


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """llama.cpp's OpenAI-compatible server (llama-cpp-python) on the embedded GGUF, for the whole session."""
    server = LlamaServer(tmp_path_factory.mktemp("llama_server") / "server.log")
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def fake_server(monkeypatch: pytest.MonkeyPatch) -> FakeServer:
    """A fake server at the adapter seam (``tests/fake_server.py``), reached at its ``fake://`` URL by any front end
    for this test: it plays the replies the test queues and records every request and cancel."""
    return registered(FakeServer(), monkeypatch)


PEERS = Path(__file__).with_name("peers")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--peers", action="store_true",
                     help="collect tests/peers: real vLLM in its own venv and llama.cpp's llama-server "
                          "(make test-peers builds them)")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """``tests/peers`` stays out of ``make test`` unless ``--peers`` asks for it."""
    if not config.getoption("--peers") and collection_path.is_relative_to(PEERS):
        return True
    return None


def pytest_sessionstart(session: pytest.Session) -> None:
    """Mark this session's environment: every server process it starts inherits the mark."""
    os.environ[SESSION_MARK] = uuid.uuid4().hex


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[pytest.TestReport]:
    """A server that failed to start or to keep running: its log's last lines go with the failure's report (a hung
    start said no more than "tritonserver not ready after 400 s")."""
    from console.server.errors import ServerError

    report = yield
    error = call.excinfo.value if call.excinfo is not None else None
    if isinstance(error, ServerError) and error.log_tail:
        report.sections.append(("tritonserver log (last lines)", "\n".join(error.log_tail)))
    return report


def _drop_unreadable_snapshot_records(session: pytest.Session) -> None:
    """pytest-textual-snapshot unpickles one record per snapshot test at the session's end, before pytest's summary;
    a record that a failed write left (a full disk) would crash it there and hide every failure: it is said and
    removed, and the run fails."""
    folder = Path(os.environ.get("TEXTUAL_SNAPSHOT_TEMPDIR", ""))
    if not folder.name or not folder.is_dir():
        return
    for record in sorted(folder.iterdir()):
        try:
            pickle.loads(record.read_bytes())
        except Exception as exc:  # whatever the unpickling raises, the record is unusable
            session.config.get_terminal_writer().line(f"unreadable snapshot record {record} ({exc!r}): removed",
                                                      red=True)
            record.unlink(missing_ok=True)
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(tryfirst=True)  # before pytest-textual-snapshot reads its records
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run when a tritonserver, guard, stub, llama.cpp or vLLM process started by it is still alive a few
    seconds after the end, or when a snapshot record cannot be read."""
    from console.server.process import _stop_all

    _drop_unreadable_snapshot_records(session)
    remove_shared(session.config._tmp_path_factory)  # type: ignore[attr-defined]

    _stop_all()  # what a test left running on purpose (session fixtures) stops like at interpreter exit
    mark = os.environ[SESSION_MARK]
    deadline = time.monotonic() + 10
    while (left := marked_servers(mark)) and time.monotonic() < deadline:
        time.sleep(0.2)
    if left:
        lines = "\n".join(f"  pid {pid}: {cmd}" for pid, cmd in left)
        session.config.get_terminal_writer().line(f"processes left behind by the test session:\n{lines}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
