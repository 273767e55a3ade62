"""Which interface a served model speaks: the one ordered list of them, the first that fits wins.

Adding an interface is one class (a subclass of :class:`~.interfaces.Interface`) and its place in
:data:`INTERFACES`: an OpenAI-compatible server's models first (their backend says so), then the bundled backend's,
vLLM's, TensorRT-LLM's, and last any one-string text model.
"""

from __future__ import annotations

from .embeddings import EmbeddingModel
from .errors import BadRequest
from .events import ModelInfo
from .interfaces import Interface
from .openai_interface import OpenAIInterface
from .triton_peers import TextInterface, TrtLlmInterface, VllmInterface

INTERFACES: tuple[type[Interface], ...] = (OpenAIInterface, Interface, VllmInterface, TrtLlmInterface, TextInterface)


def interface_of(info: ModelInfo) -> Interface:
    """The interface ``info``'s model speaks, bound to it; ClientError when none fits."""
    for kind in INTERFACES:
        if kind.matches(info):
            return kind(info)
    if EmbeddingModel.of(info) is not None:
        raise BadRequest(f"model {info.name} is an embedding model: it returns vectors, not text (ask it for "
                         "embeddings: the front's /v1/embeddings, the consoles' --embed)")
    names = ", ".join(t.name for t in info.inputs) or "none"
    raise BadRequest(f"model {info.name} has an interface this console does not speak (inputs: {names}): it "
                     "needs qaic-console's, vLLM's or TensorRT-LLM's, or one STRING input and one STRING output")
