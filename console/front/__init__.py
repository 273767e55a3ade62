"""An OpenAI-compatible API in front of any Triton LLM model (``qaic-console openai``, ``serve --openai-port``).

The flow: an HTTP request (FastAPI + uvicorn; :mod:`.app` wires the route families of :mod:`.routes`) -> its body
read as a :mod:`.protocol` model and its fields checked (:mod:`.mapping`) -> the chat template (:mod:`.tokenizers`) ->
one request to the :class:`~.protocol.Upstream` (:mod:`.upstream`: a gRPC stream to Triton through the model's
interface adapter, asyncio all the way) -> the answer (:mod:`.answer`) in OpenAI's shapes and server-sent events
(:mod:`.replies`); errors in OpenAI's shape (:mod:`.errors`). :mod:`.http_server` serves the app (uvicorn); the
command line is :mod:`console.commands.openai`.
Importing this package does not import FastAPI (the app does, when a command serves it).
"""

from .http_server import FrontServer, front_server

__all__ = ["FrontServer", "front_server"]
