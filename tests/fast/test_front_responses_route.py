"""``POST /v1/responses`` on a fake upstream: the Responses body read as a chat, its answer as a ``response``
object and as ``response.*`` events, its refusals naming the Responses fields. (Served: e2e/test_front_tools.py.)"""

from __future__ import annotations

from fake_upstream import FakeUpstream, answer, error, events, post

ASK = {"model": "smollm2", "input": "Say hi"}


def test_an_answer_is_a_response_with_a_message_item() -> None:
    upstream = FakeUpstream()
    upstream.enqueue(answer("Hi", " there", finish="stop"))
    body = post(upstream, "/v1/responses", ASK).json()
    assert body["object"] == "response" and body["status"] == "completed"
    assert body["output"][0]["content"][0]["text"] == "Hi there" and body["usage"]["output_tokens"] == 2


def test_an_answer_cut_at_its_limit_is_incomplete() -> None:
    body = post(FakeUpstream(), "/v1/responses", ASK).json()
    assert body["status"] == "incomplete" and body["incomplete_details"] == {"reason": "max_output_tokens"}


def test_instructions_and_max_output_tokens_become_the_chats() -> None:
    upstream = FakeUpstream()
    post(upstream, "/v1/responses", {**ASK, "instructions": "Be brief", "max_output_tokens": 5})
    assert upstream.sent[0].params.max_tokens == 5 and "Be brief" in upstream.sent[0].prompts[0]


def test_a_stream_is_the_response_events_in_order() -> None:
    upstream = FakeUpstream()
    upstream.enqueue(answer("Hi", finish="stop"))
    kinds = [e["type"] for e in events(post(upstream, "/v1/responses", {**ASK, "stream": True}).text)]
    assert kinds == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added", "response.output_text.delta", "response.output_text.done",
                     "response.content_part.done", "response.output_item.done", "response.completed"]


def test_a_stored_response_is_refused_by_name() -> None:
    response = post(FakeUpstream(), "/v1/responses", {**ASK, "previous_response_id": "resp_1"})
    assert error(response) == (400, "previous_response_id", None)


def test_a_refusal_names_the_responses_field_not_the_chats() -> None:
    response = post(FakeUpstream(), "/v1/responses", {**ASK, "max_output_tokens": -1})
    assert error(response) == (400, "max_output_tokens", None)


def test_instructions_must_be_text() -> None:
    assert error(post(FakeUpstream(), "/v1/responses", {**ASK, "instructions": ["x"]})) == (400, "instructions", None)
