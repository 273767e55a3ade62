"""Tool calls and the Responses API on the OpenAI-compatible front, before a real tritonserver serving the embedded
SmolLM2 (its template renders no tools: the front describes them), driven by real clients: the ``openai`` SDK,
LangChain (``langchain-openai``) and the OpenAI Agents SDK (``openai-agents``).

A required or named call is forced by the engine's grammar, so every one validates against the function's schema;
``auto`` leaves the model free (this small model answers in text, which stays text). What the parsers read is
tested without a server (fast/test_front_tool_parsing.py).
"""

from __future__ import annotations

import asyncio
import json

import jsonschema
import openai
import pytest

from console.clients import GenerationParams, info_from_config, stream
from console.core.template import chat_tokenizer
from console.front import tools
from console.front.mapping import parse

pytestmark = pytest.mark.server

STREAM = "smollm2_decoupled"
CITIES = ["Paris", "Berlin", "Rome", "Madrid", "Lisbon", "Vienna", "Oslo", "Prague", "Dublin", "Athens"]
PARAMETERS = {"type": "object", "required": ["city", "unit"], "properties": {
    "city": {"type": "string", "description": "the city's name"},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city",
                                            "parameters": PARAMETERS}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "Get the local time in a city",
                                         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}

SCHEMAS = {f["function"]["name"]: f["function"]["parameters"] for f in (WEATHER, TIME)}


@pytest.fixture(scope="module")
def sdk(front) -> openai.OpenAI:
    return openai.OpenAI(base_url=front.base_url, api_key="none", max_retries=0)


def weather_report(city: str) -> str:
    return f"It is sunny and 21 C in {city}."


@pytest.mark.parametrize("streamed", [False, True])
def test_required_and_named_calls_validate_against_the_schema_20_of_20(sdk, streamed) -> None:
    valid = 0
    for i in range(20):
        choice = "required" if i % 2 else {"type": "function", "function": {"name": "get_weather"}}
        asked = dict(model=STREAM, messages=[{"role": "user", "content": f"What is the weather in {CITIES[i % 10]}?"}],
                     tools=[WEATHER, TIME], tool_choice=choice, max_tokens=64, temperature=0.8, seed=i,
                     parallel_tool_calls=False)
        if streamed:  # the SDK assembles the delta.tool_calls chunks
            with sdk.chat.completions.stream(**asked) as events:
                choice_ = events.get_final_completion().choices[0]
        else:
            choice_ = sdk.chat.completions.create(**asked).choices[0]
        (call,) = choice_.message.tool_calls
        assert choice_.finish_reason == "tool_calls" and choice_.message.content is None
        assert call.type == "function" and call.id.startswith("call_")
        assert call.function.name in ("get_weather", "get_time") if i % 2 else call.function.name == "get_weather"
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
        valid += 1
    assert valid == 20


def test_auto_leaves_text_that_is_no_call_as_the_models_answer(sdk, embedded_server) -> None:
    messages = [{"role": "user", "content": "What is the weather in Paris?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
                {"role": "user", "content": "And in Berlin?"}]
    info = info_from_config(STREAM, embedded_server.handle.model_config(STREAM))
    job = parse({"model": STREAM, "messages": messages, "tools": [WEATHER]}, chat=True)
    prompt = tools.render(chat_tokenizer(None, info), job.messages, job.tools)  # the front's own system message
    assert "<tools>" in prompt and '"name": "get_weather"' in prompt and "<tool_response>" in prompt
    want = stream(embedded_server.grpc_url, STREAM, [prompt], GenerationParams(max_tokens=40)).replies()[0].text
    assert "<tool_call>" not in want  # this model answers in text
    whole = sdk.chat.completions.create(model=STREAM, messages=messages, tools=[WEATHER], max_tokens=40).choices[0]
    assert whole.message.content == want and whole.message.tool_calls is None and whole.finish_reason != "tool_calls"
    chunks = list(sdk.chat.completions.create(model=STREAM, messages=messages, tools=[WEATHER], max_tokens=40,
                                              stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == want
    assert not any(c.choices[0].delta.tool_calls for c in chunks if c.choices)


def test_a_schema_the_grammar_cannot_compile_is_refused_naming_tool_choice(sdk) -> None:
    broken = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "x": {"type": "frobnicate"}}}}}
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.chat.completions.create(model=STREAM, messages=[{"role": "user", "content": "hi"}], tools=[broken],
                                    tool_choice="required", max_tokens=8)
    assert refused.value.body["param"] == "tool_choice" and "structured_outputs" in refused.value.body["message"]
    assert sdk.chat.completions.create(model=STREAM, messages=[{"role": "user", "content": "hi"}],
                                       max_tokens=2).usage.completion_tokens == 2


# --------------------------------------------------------------------------- the Responses API


def test_responses_answer_as_chat_does_streamed_or_not_and_refuse_what_they_cannot(sdk) -> None:
    asked = dict(model=STREAM, instructions="Answer in one sentence.", input="What is the capital of France?",
                 max_output_tokens=24)
    chat = sdk.chat.completions.create(model=STREAM, max_tokens=24, messages=[
        {"role": "system", "content": asked["instructions"]}, {"role": "user", "content": asked["input"]}])
    whole = sdk.responses.create(**asked)
    assert whole.output_text == chat.choices[0].message.content and whole.object == "response"
    assert whole.status == ("incomplete" if chat.choices[0].finish_reason == "length" else "completed")
    assert (whole.usage.input_tokens, whole.usage.output_tokens) == (chat.usage.prompt_tokens,
                                                                     chat.usage.completion_tokens)
    with sdk.responses.stream(**asked) as events:
        kinds = [event.type for event in events]
        final = events.get_final_response()
    assert final.output_text == whole.output_text and kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == f"response.{whole.status}" and "response.output_text.delta" in kinds
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.responses.create(model=STREAM, input="hi", previous_response_id="resp_1")
    assert refused.value.body["param"] == "previous_response_id"


@pytest.mark.parametrize("streamed", [False, True])
def test_responses_function_calls_validate_and_stream_as_items(sdk, streamed) -> None:
    tool = {"type": "function", **WEATHER["function"]}
    asked = dict(model=STREAM, input="What is the weather in Oslo?", tools=[tool], tool_choice="required",
                 max_output_tokens=64)
    if streamed:
        with sdk.responses.stream(**asked) as events:
            kinds = [event.type for event in events]
            response = events.get_final_response()
        assert kinds.count("response.output_item.added") == kinds.count("response.output_item.done") >= 1
        assert "response.function_call_arguments.delta" in kinds and "response.function_call_arguments.done" in kinds
    else:
        response = sdk.responses.create(**asked)
    calls = [item for item in response.output if item.type == "function_call"]
    assert calls and all(c.name == "get_weather" and c.call_id.startswith("call_") for c in calls)
    for call in calls:
        jsonschema.validate(json.loads(call.arguments), PARAMETERS)


# --------------------------------------------------------------------------- LangChain and the Agents SDK


def test_langchain_bind_tools_round_trip_and_structured_output(front) -> None:
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from pydantic import BaseModel

    @tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        return weather_report(city)

    llm = ChatOpenAI(model=STREAM, base_url=front.base_url, api_key="none", max_retries=0, max_tokens=48,
                     temperature=0)
    question = [HumanMessage("What is the weather in Paris?")]
    call = llm.bind_tools([get_weather], tool_choice="get_weather").invoke(question)
    assert [c["name"] for c in call.tool_calls] == ["get_weather"] and isinstance(call.tool_calls[0]["args"]["city"],
                                                                                   str)
    result = get_weather.invoke(call.tool_calls[0])
    final = llm.bind_tools([get_weather]).invoke([*question, call, result])
    assert final.tool_calls == [] and final.content  # the model's answer after the tool's result
    chunks = list(llm.bind_tools([get_weather], tool_choice="get_weather").stream(question))
    streamed = chunks[0]
    for chunk in chunks[1:]:
        streamed += chunk
    assert streamed.tool_calls[0]["args"] == call.tool_calls[0]["args"]  # greedy: the same call, assembled

    class Person(BaseModel):
        """A person."""

        name: str
        age: int

    person = llm.with_structured_output(Person, method="function_calling").invoke(
        "Describe a baker named Anna who is 34 years old.")
    assert isinstance(person, Person)


@pytest.mark.parametrize("api", ["responses", "chat_completions"])
def test_an_agents_sdk_agent_calls_its_tool_and_answers(front, api) -> None:
    from agents import (
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from agents.items import MessageOutputItem, ToolCallItem, ToolCallOutputItem

    set_tracing_disabled(True)  # no traces leave the machine
    asked: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        asked.append(city)
        return weather_report(city)

    async def run(streamed: bool):
        async with openai.AsyncOpenAI(base_url=front.base_url, api_key="none", max_retries=0) as client:
            model = (OpenAIResponsesModel if api == "responses" else OpenAIChatCompletionsModel)(STREAM, client)
            agent = Agent(name="weather", instructions="You answer questions about the weather.",
                          tools=[get_weather], model=model,
                          model_settings=ModelSettings(tool_choice="required", max_tokens=48))
            if not streamed:
                return await Runner.run(agent, "What is the weather in Paris?", max_turns=4)
            result = Runner.run_streamed(agent, "What is the weather in Paris?", max_turns=4)
            async for _ in result.stream_events():
                pass
            return result

    for streamed in (False, True):
        result = asyncio.run(run(streamed))
        kinds = [type(item) for item in result.new_items]
        # the call, the tool's result, then the answer (the agent resets tool_choice after a call)
        assert kinds == [ToolCallItem, ToolCallOutputItem, MessageOutputItem], kinds
        assert isinstance(result.final_output, str) and result.final_output
    assert len(asked) == 2 and all(isinstance(city, str) and city for city in asked)
