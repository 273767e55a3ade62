"""Tool calls on the request side: ``tools``, ``tool_choice`` and ``parallel_tool_calls`` checked into a
:class:`Tools`, the grammar that enforces a call, and the conversation with its tools as the chat template renders it.

``tool_choice`` ``"required"`` or a named function is enforced by the ``structured_outputs`` control (the engine's
grammar): a named function's answer is its arguments, a JSON object of its ``parameters`` schema; a required
call's is a JSON array of ``{"name", "arguments"}`` objects, one per call (at most one without
``parallel_tool_calls``). ``"auto"`` lets the model write and :mod:`.toolcalls` reads the calls out of its text;
``"none"`` leaves the tools out of the prompt.

A template that renders ``tools`` (transformers' ``apply_chat_template(..., tools=...)``) gets them; one that does
not (the embedded SmolLM2's) gets them in a system message the front writes (:data:`SYSTEM`, the Hermes wording:
calls in ``<tool_call>`` tags). Assistant ``tool_calls`` and ``role: "tool"`` results in the history go to the
template as they are when it renders them, else as text in the same Hermes form. Which a template renders is found
by rendering a probe once per tokenizer.
"""

from __future__ import annotations

import json
import re
import weakref
from dataclasses import dataclass, field
from typing import Any

from .errors import bad_request

FIELDS = ("tools", "tool_choice", "parallel_tool_calls")
CHOICES = ("none", "auto", "required")
NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
NO_PARAMETERS = {"type": "object", "properties": {}}
SYSTEM = ("You may call one or more functions to assist with the user query.\n\nYou are provided with function "
          "signatures within <tools></tools> XML tags:\n<tools>\n{tools}\n</tools>\n\nFor each function call, return "
          "a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
          '{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>')
NESTED = ("items", "anyOf", "oneOf", "allOf", "not", "prefixItems", "additionalProperties")  # schemas in a schema
NAMED = ("properties", "$defs", "definitions", "patternProperties")  # name -> schema
PROBE = "qaic_probe_function"
_ABILITIES: weakref.WeakKeyDictionary[Any, tuple[bool, bool]] = weakref.WeakKeyDictionary()


@dataclass
class Tools:
    """The functions a request offers (OpenAI's ``{"type": "function", "function": {...}}`` entries, checked) and
    how the model may call them: ``choice`` is ``auto``, ``required``, ``none`` or a function's name."""

    functions: list[dict[str, Any]] = field(default_factory=list)
    choice: str = "auto"
    parallel: bool = True

    @property
    def active(self) -> bool:
        """The model is offered the tools and its answer is read for calls."""
        return bool(self.functions) and self.choice != "none"

    @property
    def forced(self) -> bool:
        """The answer is calls only (``required`` or a named function)."""
        return self.active and self.choice not in ("auto", "none")

    @property
    def named(self) -> str | None:
        """The function the answer must call, None unless ``tool_choice`` names one."""
        return None if self.choice in CHOICES else self.choice

    def parameters(self, name: str) -> dict[str, Any]:
        """The function's parameters schema, closed (:func:`closed`) for the grammar."""
        function = next(f["function"] for f in self.functions if f["function"]["name"] == name)
        return closed(function.get("parameters") or NO_PARAMETERS)

    def grammar(self) -> dict[str, Any] | None:
        """The ``structured_outputs`` control enforcing a call (vLLM's ``{"json": schema}``), None for ``auto``.
        What it allows validates against the functions' own schemas."""
        if self.named:
            return {"json": self.parameters(self.named)}
        if self.choice != "required":
            return None
        calls = [{"type": "object", "additionalProperties": False, "required": ["name", "arguments"],
                  "properties": {"name": {"const": f["function"]["name"]},
                                 "arguments": self.parameters(f["function"]["name"])}} for f in self.functions]
        array: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"anyOf": calls}}
        if not self.parallel:
            array["maxItems"] = 1
        return {"json": array}


def closed(schema: Any) -> Any:
    """``schema`` with ``additionalProperties: false`` wherever an object schema leaves it out (as OpenAI's strict
    mode and xgrammar do): a small model then writes the properties it was given, not new ones without end."""
    if isinstance(schema, list):
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: closed(v) if k in NESTED else (
        {n: closed(s) for n, s in v.items()} if k in NAMED and isinstance(v, dict) else v) for k, v in schema.items()}
    if (out.get("type") == "object" or "properties" in out) and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def _function(entry: Any, where: str) -> dict[str, Any]:
    function = entry.get("function") if isinstance(entry, dict) and entry.get("type") == "function" else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not NAME.match(
            function["name"]):
        raise bad_request(f"{where} must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}} with a name "
                          "of letters, digits, _ . - (at most 64)", "tools")
    parameters = function.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise bad_request(f"{where}: parameters must be a JSON schema (an object)", "tools")
    if function.get("description") is not None and not isinstance(function["description"], str):
        raise bad_request(f"{where}: description must be a string", "tools")
    return {"type": "function", "function": {k: v for k, v in function.items() if v is not None}}


def _choice(value: Any, names: list[str]) -> str:
    if value in CHOICES:
        return value
    name = value.get("function", {}).get("name") if isinstance(value, dict) and value.get("type") == "function" \
        and isinstance(value.get("function"), dict) else None
    if not isinstance(name, str):
        raise bad_request(f"tool_choice must be one of {', '.join(CHOICES)} or {{\"type\": \"function\", "
                          "\"function\": {\"name\": ...}}", "tool_choice")
    if name not in names:
        raise bad_request(f"tool_choice names {name[:64]!r}, which is not among the tools "
                          f"({', '.join(names) or 'none given'})", "tool_choice")
    return name


def parse(body: dict[str, Any]) -> Tools | None:
    """The tools a chat body offers, checked (None when it offers none); APIError 400 naming the field."""
    given, choice, parallel = (body.get(name) for name in FIELDS)
    if given is not None and not isinstance(given, list):
        raise bad_request("tools must be a list of functions", "tools")
    if parallel is not None and not isinstance(parallel, bool):
        raise bad_request("parallel_tool_calls must be true or false", "parallel_tool_calls")
    offered = given or []
    functions = [_function(entry, f"tool {i + 1} of {len(offered)}") for i, entry in enumerate(offered)]
    names = [f["function"]["name"] for f in functions]
    if len(set(names)) < len(names):
        raise bad_request("tools must have different names", "tools")
    if not functions:
        if choice not in (None, "none"):
            raise bad_request("tool_choice needs tools", "tool_choice")
        return None
    return Tools(functions, _choice("auto" if choice is None else choice, names), parallel is not False)


# --------------------------------------------------------------------------- the history


def _arguments(text: Any, where: str) -> Any:
    """A call's ``arguments`` string as the object templates expect (the text itself when it is not JSON)."""
    if not isinstance(text, str):
        raise bad_request(f"{where}: a tool call's function.arguments must be a string (JSON)", "messages")
    try:
        return json.loads(text)
    except ValueError:
        return text


def history_fields(message: dict[str, Any], where: str) -> dict[str, Any]:
    """The tool fields of one history message: an assistant's ``tool_calls``, a tool result's ``tool_call_id``."""
    role, out = message["role"], {}
    if role == "assistant" and message.get("tool_calls"):
        calls = message["tool_calls"]
        if not isinstance(calls, list) or not all(isinstance(c, dict) and isinstance(c.get("function"), dict)
                                                  and isinstance(c["function"].get("name"), str) for c in calls):
            raise bad_request(f"{where}: tool_calls must be a list of {{\"id\", \"type\": \"function\", "
                              "\"function\": {\"name\", \"arguments\"}}", "messages")
        out["tool_calls"] = [{"id": str(c.get("id", "")), "type": "function", "function": {
            "name": c["function"]["name"], "arguments": _arguments(c["function"].get("arguments", "{}"), where)}}
            for c in calls]
    if role == "tool":
        if not isinstance(message.get("tool_call_id"), str):
            raise bad_request(f"{where}: a tool message needs its tool_call_id", "messages")
        out["tool_call_id"] = message["tool_call_id"]
        if isinstance(message.get("name"), str):
            out["name"] = message["name"]
    return out


def _as_text(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history with calls and results written as Hermes text, for a template that renders neither."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.get("tool_calls"):
            calls = "\n".join("<tool_call>\n" + json.dumps({"name": c["function"]["name"],
                                                           "arguments": c["function"]["arguments"]}) + "\n</tool_call>"
                              for c in message["tool_calls"])
            out.append({"role": "assistant", "content": "\n".join(filter(None, [message["content"], calls]))})
        elif message["role"] == "tool":
            result = f"<tool_response>\n{message['content']}\n</tool_response>"
            if out and out[-1]["role"] == "user" and out[-1]["content"].startswith("<tool_response>"):
                out[-1] = {"role": "user", "content": out[-1]["content"] + "\n" + result}
            else:
                out.append({"role": "user", "content": result})
        else:
            out.append({"role": message["role"], "content": message["content"]})
    return out


# --------------------------------------------------------------------------- what a template renders


def _renders(tokenizer: Any, messages: list[dict[str, Any]], words: tuple[str, ...], **extra: Any) -> bool:
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **extra)
    except Exception:  # a template that refuses the probe does not render it
        return False
    return all(word in text for word in words)


def abilities(tokenizer: Any) -> tuple[bool, bool]:
    """(renders ``tools``, renders calls and results in the history) for ``tokenizer``'s template (probed once)."""
    known = _ABILITIES.get(tokenizer)
    if known is None:
        tool = {"type": "function", "function": {"name": PROBE, "description": "probe", "parameters": NO_PARAMETERS}}
        call = {"id": "abcdefghi", "type": "function", "function": {"name": PROBE + "_call", "arguments": {"x": 1}}}
        history: list[dict[str, Any]] = [
            {"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": PROBE + "_result", "tool_call_id": "abcdefghi"}]
        known = (_renders(tokenizer, [{"role": "user", "content": "hi"}], (PROBE,), tools=[tool]),
                 _renders(tokenizer, history, (PROBE + "_call", PROBE + "_result"), tools=[tool]))
        _ABILITIES[tokenizer] = known
    return known


def render(tokenizer: Any, messages: list[dict[str, Any]], tools: Tools | None) -> str:
    """The conversation, its tools included when they are active, as the template renders it for the answer."""
    offered = tools.functions if tools is not None and tools.active else None
    native_tools, native_history = abilities(tokenizer)
    if not native_history:
        messages = _as_text(messages)
    if offered and not native_tools:
        described = SYSTEM.format(tools="\n".join(json.dumps(f) for f in offered))
        if messages and messages[0]["role"] == "system":
            messages = [{"role": "system", "content": messages[0]["content"] + "\n\n" + described}, *messages[1:]]
        else:
            messages = [{"role": "system", "content": described}, *messages]
        offered = None
    extra = {"tools": offered} if offered else {}
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **extra)
