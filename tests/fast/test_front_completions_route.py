"""``POST /v1/completions`` on a fake upstream: the answer whole and streamed, what the model is sent, the model's
errors by whose fault they are, and the refusals naming their field. (Served: e2e/test_front_completions.py.)"""

from __future__ import annotations

from fake_server import bundled_info, plain_info
from fake_upstream import FakeUpstream, answer, error, events, failure, full_info, post

ASK = {"model": "smollm2", "prompt": "Once"}


def test_an_answer_has_the_models_text_finish_and_counts() -> None:
    body = post(FakeUpstream(), "/v1/completions", ASK).json()
    assert body["object"] == "text_completion" and body["choices"][0]["text"] == "Hello world"
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


def test_the_model_gets_the_prompt_and_the_apis_default_max_tokens() -> None:
    upstream = FakeUpstream()
    post(upstream, "/v1/completions", ASK)
    assert upstream.sent[0].prompts == ["Once"] and upstream.sent[0].params.max_tokens == 16


def test_fields_become_the_models_controls() -> None:
    upstream = FakeUpstream()
    post(upstream, "/v1/completions", {**ASK, "max_tokens": 4, "temperature": 0.5, "stop": "x"})
    params = upstream.sent[0].params
    assert (params.max_tokens, params.temperature, params.stop) == (4, 0.5, ("x",))


def test_the_answers_request_id_is_the_one_sent_upstream() -> None:
    upstream = FakeUpstream()
    response = post(upstream, "/v1/completions", ASK)
    assert response.headers["x-request-id"] == upstream.sent[0].params.request_id


def test_a_stream_sends_each_response_then_the_finish_and_done() -> None:
    upstream = FakeUpstream()
    upstream.enqueue(answer("A", "B", "C", finish="stop"))
    chunks = events(post(upstream, "/v1/completions", {**ASK, "stream": True}).text)
    assert chunks[-1] == "[DONE]" and "".join(c["choices"][0]["text"] for c in chunks[:-1]) == "ABC"
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"


def test_a_stream_ends_with_the_usage_when_asked() -> None:
    chunks = events(post(FakeUpstream(), "/v1/completions", {**ASK, "stream": True,
                                                             "stream_options": {"include_usage": True}}).text)
    assert chunks[-2]["choices"] == [] and chunks[-2]["usage"]["total_tokens"] == 5


def test_several_prompts_go_to_the_model_in_one_request() -> None:
    upstream = FakeUpstream()
    body = post(upstream, "/v1/completions", {**ASK, "prompt": ["a", "b"]}).json()
    assert [s.prompts for s in upstream.sent] == [["a", "b"]]
    assert [c["index"] for c in body["choices"]] == [0, 1]


def test_n_answers_are_sampled_with_seed_plus_i() -> None:
    upstream = FakeUpstream()
    body = post(upstream, "/v1/completions", {**ASK, "n": 2, "seed": 7}).json()
    assert [s.params.seed for s in upstream.sent] == [7, 8] and len(body["choices"]) == 2


def test_echo_without_tokens_to_make_sends_nothing_upstream() -> None:
    upstream = FakeUpstream()
    body = post(upstream, "/v1/completions", {**ASK, "echo": True, "max_tokens": 0}).json()
    assert upstream.sent == [] and body["choices"][0]["text"] == "Once"


def test_logprobs_come_with_the_text_they_score() -> None:
    upstream = FakeUpstream(full_info("smollm2"))
    entries = [[{"id": 1, "token": "Hi", "logprob": -0.5, "top": [{"id": 1, "token": "Hi", "logprob": -0.5}]}]]
    upstream.enqueue(answer("Hi", logprobs=entries))
    logprobs = post(upstream, "/v1/completions", {**ASK, "logprobs": 1}).json()["choices"][0]["logprobs"]
    assert logprobs["tokens"] == ["Hi"] and logprobs["top_logprobs"] == [{"Hi": -0.5}]


def test_the_one_model_served_answers_when_none_is_named() -> None:
    upstream = FakeUpstream()
    assert post(upstream, "/v1/completions", {"prompt": "x"}).json()["model"] == "smollm2"


def test_a_model_must_be_named_when_several_are_served() -> None:
    upstream = FakeUpstream(bundled_info("a"), bundled_info("b"))
    assert error(post(upstream, "/v1/completions", {"prompt": "x"})) == (400, "model", None)


def test_an_unknown_model_is_a_404_model_not_found() -> None:
    assert error(post(FakeUpstream(), "/v1/completions", {**ASK, "model": "nope"})) == (404, "model",
                                                                                       "model_not_found")


def test_an_unknown_field_is_refused_by_name() -> None:
    assert error(post(FakeUpstream(), "/v1/completions", {**ASK, "bogus": 1})) == (400, "bogus", None)


def test_a_control_the_model_has_no_input_for_is_refused_by_its_field() -> None:
    upstream = FakeUpstream(plain_info("p"))
    assert error(post(upstream, "/v1/completions", {"model": "p", "prompt": "x", "temperature": 1.0})) == (
        400, "temperature", None)


def test_a_models_refusal_is_the_clients_400() -> None:
    upstream = FakeUpstream()
    upstream.enqueue(failure("the prompt is 9000 bytes, over the 8000 this model holds"))
    response = post(upstream, "/v1/completions", ASK)
    assert error(response) == (400, None, None) and "9000 bytes" in response.json()["error"]["message"]


def test_the_backends_own_failure_is_a_500_by_its_code() -> None:
    upstream = FakeUpstream()
    upstream.enqueue(failure("the prompt is 9000 bytes", refused=False))  # its code, not its words, decides
    assert error(post(upstream, "/v1/completions", ASK))[0] == 500


def test_a_models_error_without_a_code_before_any_text_is_the_clients_400() -> None:
    upstream = FakeUpstream()
    upstream.enqueue(failure("generation failed: the device is gone", refused=None))
    assert error(post(upstream, "/v1/completions", ASK))[0] == 400


def test_a_models_refusal_of_a_control_names_the_field_that_gave_it() -> None:
    upstream = FakeUpstream(full_info("smollm2"))
    upstream.enqueue(failure("structured_outputs cannot be compiled: bad regex"))
    assert error(post(upstream, "/v1/completions", {**ASK, "guided_regex": "("})) == (400, "guided_regex", None)


def test_an_error_after_text_ends_the_stream_with_an_error_event() -> None:
    upstream = FakeUpstream()
    upstream.enqueue(failure("generation failed: boom", "Hel", refused=False))
    response = post(upstream, "/v1/completions", {**ASK, "stream": True})
    chunks = events(response.text)
    assert response.status_code == 200 and chunks[0]["choices"][0]["text"] == "Hel"
    assert chunks[-2]["error"]["type"] == "server_error" and chunks[-1] == "[DONE]"


def test_a_field_of_the_wrong_json_type_is_refused_saying_what_it_takes() -> None:
    response = post(FakeUpstream(), "/v1/completions", {**ASK, "stream": "yes"})
    assert error(response) == (400, "stream", None)
    assert response.json()["error"]["message"] == "stream must be true or false"


def test_a_number_is_not_taken_for_a_switch_nor_a_switch_for_a_number() -> None:
    assert error(post(FakeUpstream(), "/v1/completions", {**ASK, "echo": 1}))[1] == "echo"
    assert error(post(FakeUpstream(), "/v1/completions", {**ASK, "n": True}))[1] == "n"
