"""An OpenAI-compatible API in front of any Triton LLM model (``qaic-console openai``, ``serve --openai-port``).

The flow: an HTTP request (FastAPI + uvicorn, :mod:`.app`) -> its fields checked (:mod:`.mapping`) -> the
chat template (:mod:`.tokenizers`) -> one gRPC stream to Triton through the model's interface adapter
(:mod:`.upstream`, asyncio all the way) -> OpenAI's answer shapes and server-sent events (:mod:`.replies`);
errors in OpenAI's shape (:mod:`.errors`). :mod:`.command` has the command line and the server thread.
Importing this package does not import FastAPI (the app does, when a command serves it).
"""

from .command import FrontServer, front_server, openai_command

__all__ = ["FrontServer", "front_server", "openai_command"]
