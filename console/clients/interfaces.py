"""Which Triton LLM interface a model speaks, and how to build its inputs and read its outputs.

The bundled backend's interface (also the seed's: a STRING ``prompt`` in, ``text_output`` out) takes
the controls by their own names. Only the optional inputs a model declares are sent;
:meth:`Interface.ignored` names the controls a model would not receive.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .errors import SERVER, ClientError
from .events import ModelInfo
from .params import BY_NAME, CONTROLS, GenerationParams
from .wire import output_list, tensor

OUTPUTS = ("text_output", "finish_reason", "input_tokens", "output_tokens")
Outputs = dict[str, list | None]


class Interface:
    """The bundled backend's interface: ``prompt`` [-1] (one or more prompts) -> ``text_output`` [N]."""

    name = "qaic-console"
    prompt = "prompt"

    @classmethod
    def matches(cls, info: ModelInfo) -> bool:
        return info.input(cls.prompt) is not None and info.output("text_output") is not None

    def sendable(self, info: ModelInfo, params: GenerationParams) -> dict[str, Any]:
        """The set controls this model declares an input for."""
        return {n: v for n, v in params.values.items() if info.input(n) is not None}

    def ignored(self, info: ModelInfo, params: GenerationParams | None = None) -> list[str]:
        """Controls (set ones, or all when ``params`` is None) this model would not receive."""
        names = [c.name for c in CONTROLS] if params is None else list(params.values)
        return [n for n in names if info.input(n) is None]

    def inputs(self, module: Any, info: ModelInfo, prompts: Sequence[str], params: GenerationParams) -> list[Any]:
        """InferInputs for tritonclient.http or .grpc (``module``)."""
        out = [tensor(module, self.prompt, "BYTES", prompts)]
        for name, value in self.sendable(info, params).items():
            control = BY_NAME[name]
            out.append(tensor(module, name, control.wire, value if control.multiple else [value]))
        exclude = params.exclude_input_in_output
        if exclude is not None and info.input("exclude_input_in_output") is not None:
            out.append(tensor(module, "exclude_input_in_output", "BOOL", [exclude]))
        return out

    def outputs(self, result: Any, n: int) -> Outputs:
        """``text_output`` etc. as lists of ``n`` values (None when the model does not send one)."""
        return {name: output_list(result, name, n, texts=name in ("text_output", "finish_reason")) for name in OUTPUTS}

    def generate_body(self, info: ModelInfo, prompts: Sequence[str], params: GenerationParams,
                      request_id: str) -> dict[str, Any]:
        """The generate endpoint's JSON: ``{"prompt": ..., "id": ...}`` plus the declared optional inputs."""
        body: dict[str, Any] = {self.prompt: prompts[0] if len(prompts) == 1 else list(prompts)}
        if info.input("id") is not None:
            body["id"] = request_id
        for name, value in self.sendable(info, params).items():
            body[name] = list(value) if BY_NAME[name].multiple else value
        if params.exclude_input_in_output is not None and info.input("exclude_input_in_output") is not None:
            body["exclude_input_in_output"] = params.exclude_input_in_output
        return body

    @staticmethod
    def parse_generate(data: dict[str, Any], n: int) -> Outputs:
        """The generate endpoint's answer as :meth:`outputs` lists (one value per prompt)."""
        out: Outputs = {}
        for name in OUTPUTS:
            value = data.get(name)
            if value is None:
                out[name] = None
                continue
            values = value if isinstance(value, list) else [value]
            if len(values) != n:
                raise ClientError(f"the model returned {len(values)} {name} values for {n} prompts", SERVER)
            out[name] = values
        return out


INTERFACES: tuple[type[Interface], ...] = (Interface,)


def interface_of(info: ModelInfo) -> Interface:
    """The interface ``info``'s model speaks; ClientError when none fits."""
    for kind in INTERFACES:
        if kind.matches(info):
            return kind()
    names = ", ".join(t.name for t in info.inputs) or "none"
    raise ClientError(f"model {info.name} has an interface this console does not speak (inputs: {names}): "
                      "it needs a STRING input 'prompt' and a STRING output 'text_output'")
