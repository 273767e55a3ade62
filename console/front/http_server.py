"""The front's HTTP server: uvicorn serving its app, in a thread of its own or in the calling one."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from console.clients import UsageError

from .media import MediaRules

if TYPE_CHECKING:  # the app imports FastAPI: it is imported when the front serves
    from .state import Front

DRAIN = 5  # s open requests get to finish once the front stops (new connections are refused at once)


class FrontServer:
    """uvicorn serving the front's app on ``host:port``: in a thread of its own (:meth:`start`) or in the
    calling one (:meth:`run`)."""

    def __init__(self, front: Front, host: str, port: int, drain: int = DRAIN) -> None:
        import uvicorn  # the server and the app (FastAPI) are imported when the front serves, not with the package

        from .app import create_app

        self.front, self.host, self.port = front, host, port
        config = uvicorn.Config(create_app(front), host=host, port=port, log_level="warning", access_log=False,
                                timeout_graceful_shutdown=drain)
        self.server = uvicorn.Server(config)
        self.thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    def run(self, listening: Callable[[], None]) -> None:
        """Serve in the calling thread until Ctrl-C or SIGTERM (uvicorn's handlers); ``listening()`` once it listens,
        not before: an address said earlier would refuse the first connections."""
        def tell() -> None:
            if self._listening(lambda: self.server.should_exit, timeout=None):
                listening()

        threading.Thread(target=tell, name="qc-openai-front-listening", daemon=True).start()
        self.server.run()

    def start(self, timeout: float = 30.0) -> None:
        """Serve in a thread; ClientError when it cannot listen."""
        self.thread = threading.Thread(target=self.server.run, name="qc-openai-front", daemon=True)
        self.thread.start()
        thread = self.thread
        if not self._listening(lambda: not thread.is_alive(), timeout):
            self.stop()
            raise UsageError(f"the OpenAI-compatible API cannot listen on {self.host}:{self.port}")

    def _listening(self, ended: Callable[[], bool], timeout: float | None) -> bool:
        """Whether uvicorn listens, waited for until ``ended()`` or ``timeout`` seconds (None: no limit)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.server.started and not ended() and (deadline is None or time.monotonic() < deadline):
            time.sleep(0.02)
        return bool(self.server.started)

    def stop(self) -> None:
        self.server.should_exit = True
        if self.thread is not None:
            self.thread.join(15)
            self.thread = None


def front_server(triton_grpc: str, host: str, port: int, api_key: str | None,
                 tokenizers: Sequence[str], metrics_url: str | None = None, tool_parser: str | None = None,
                 drain: int = DRAIN, media: MediaRules | None = None,
                 triton_key: Callable[[], str] = str) -> FrontServer:
    """The front before the tritonserver at ``triton_grpc``; ``triton_key()``: the key of its repository API ('':
    none known), which the runtime LoRA routes need (served with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING``, as vLLM's)."""
    from .routes import lora  # with the app's modules: FastAPI is imported when the front serves
    from .state import Front
    from .tokenizers import Tokenizers
    from .upstream import TritonUpstream

    front = Front(TritonUpstream(triton_grpc, metrics_url, triton_key), api_key, Tokenizers(tokenizers), tool_parser,
                  media or MediaRules(), runtime_lora=lora.enabled())
    return FrontServer(front, host, port, drain)
