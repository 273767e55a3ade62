"""The engine's log-probabilities, forced continuations and grammars on the embedded model (real weights).

Log-probabilities are the model's own distribution: a log-softmax of transformers' logits on the same
weights, for generated tokens and for a continuation fed instead of sampled (teacher forcing, what an
accuracy check scores). A grammar masks each row alone: a bounded JSON schema gives valid JSON every time,
greedy or sampled, at fp32 and int4; a regex gives a match; a constrained row's answer does not depend on
its neighbours; a grammar that cannot compile is refused before anything runs.
"""

from __future__ import annotations

import json
import re
import sys

import jsonschema
import numpy as np
import pytest
import torch
from helpers import engine_threads  # noqa: F401 (autouse: the engine's threads)

from backend_model.contract.errors import BadRequest
from backend_model.engine.loop import Engine, Sequence
from backend_model.engine.sampling import SamplingParams
from backend_model.models import eos_ids, load_pretrained
from backend_model.sessions.cpu import CpuKVSession
from backend_model.sessions.protocol import Dims

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a faraway kingdom,"]
PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age", "job"],
          "properties": {"name": {"type": "string", "maxLength": 16}, "age": {"type": "integer", "minimum": 0,
                                                                               "maximum": 120},
                         "job": {"enum": ["baker", "pilot", "nurse", "poet"]}}}  # bounded: it must close
PHONE = r"\([0-9]{3}\) [0-9]{3}-[0-9]{4}"
ASKS = ["a baker", "a pilot", "a child", "a nurse"]


@pytest.fixture(scope="module")
def smol():
    return load_pretrained("embedded", progress=lambda m: None)


def engine(smol, precision: str = "fp32", slots: int = 4) -> Engine:
    model, tokenizer = smol
    dims = Dims(1, 16, 256, model.config.vocab_size, slots)
    return Engine(CpuKVSession.of(model, dims, precision), tokenizer, eos_ids(model, tokenizer))


def chat(smol, text: str) -> str:
    return smol[1].apply_chat_template([{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)


def hf_log_softmax(smol, ids: list[int]) -> torch.Tensor:
    """transformers' log-softmax over the vocabulary at every position of ``ids`` (float64)."""
    with torch.inference_mode():
        return torch.log_softmax(smol[0](torch.tensor([ids])).logits[0].double(), -1)


def run(eng: Engine, seqs: list[Sequence]) -> list[Sequence]:
    eng.enqueue(seqs)
    while not all(s.finished for s in seqs):
        eng.step()
    return seqs


def test_greedy_logprobs_are_the_log_softmax_of_transformers_logits(smol) -> None:
    eng = engine(smol)
    seqs = eng.generate(PROMPTS, SamplingParams(max_tokens=12, logprobs=5))
    for prompt, seq in zip(PROMPTS, seqs):
        ids = eng.encode(prompt)
        reference = hf_log_softmax(smol, ids + seq.tokens)
        assert len(seq.logprobs) == len(seq.tokens) == 12
        for i, (token, entry) in enumerate(zip(seq.tokens, seq.logprobs)):
            row = reference[len(ids) - 1 + i]
            best = torch.topk(row, 5)
            assert entry.id == token == int(best.indices[0])  # greedy: the chosen token is the most likely
            assert entry.logprob == pytest.approx(row[token].item(), abs=1e-4)
            assert [t for t, _ in entry.top] == best.indices.tolist()
            assert [lp for _, lp in entry.top] == pytest.approx(best.values.tolist(), abs=1e-4)
    assert all(not s.logprobs for s in eng.generate(PROMPTS[:1], SamplingParams(max_tokens=3)))  # not asked


def test_a_forced_continuation_is_scored_as_transformers_scores_it(smol) -> None:
    eng = engine(smol)
    tokenizer = smol[1]
    prompt = eng.encode("The capital of France is")
    forced = tokenizer(" Paris, the city of light.", add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
    forced += tokenizer(" And more", add_special_tokens=False).input_ids  # EOS inside does not end it
    scored, beside = run(eng, [eng.prepare(prompt, SamplingParams(stop=("city",)), forced=forced),
                               eng.prepare(eng.encode(PROMPTS[1]), SamplingParams(max_tokens=20))])
    reference = hf_log_softmax(smol, prompt + forced)
    expected = [reference[len(prompt) - 1 + i, t].item() for i, t in enumerate(forced)]
    assert scored.tokens == forced and [e.id for e in scored.logprobs] == forced
    assert [e.logprob for e in scored.logprobs] == pytest.approx(expected, abs=1e-4)
    assert scored.finish_reason == "length" and scored.text.startswith(" Paris, the city of light.")
    alone = run(eng, [eng.prepare(prompt, SamplingParams(logprobs=2), forced=forced)])[0]
    assert [e.logprob for e in alone.logprobs] == [e.logprob for e in scored.logprobs]  # its neighbour changes nothing
    assert [len(e.top) for e in alone.logprobs] == [2] * len(forced)
    with pytest.raises(BadRequest, match="outside the vocabulary"):
        eng.prepare(prompt, SamplingParams(), forced=[10**6])
    with pytest.raises(BadRequest, match="over ctx_len 256"):
        eng.prepare(prompt, SamplingParams(), forced=[forced[0]] * 300)


@pytest.mark.parametrize("precision", ["fp32", "int4"])
def test_a_bounded_json_schema_always_gives_json_that_validates(smol, precision: str) -> None:
    eng = engine(smol, precision, slots=8)
    spec = {"json": PERSON}
    prompts = [chat(smol, f"Describe {who} as JSON with name, age and job.") for who in ASKS]
    seqs = [eng.prepare(eng.encode(p), SamplingParams(max_tokens=64, structured_outputs=spec)) for p in prompts]
    seqs += [eng.prepare(eng.encode(p), SamplingParams(max_tokens=64, temperature=1.0, seed=seed,
                                                       structured_outputs=spec))
             for seed, p in enumerate(prompts)]
    for seq in run(eng, seqs):
        jsonschema.validate(json.loads(seq.text), PERSON)
        assert seq.finish_reason == "stop", seq.text  # the grammar ended it: nothing else could follow


def test_json_object_regex_and_choice_constrain_the_reply(smol) -> None:
    eng = engine(smol)
    choices = ["Paris", "Lyon", 'not "sure"']
    obj, phone, choice = run(eng, [
        eng.prepare(eng.encode(chat(smol, "Give a JSON object about a cat.")),
                    SamplingParams(max_tokens=96, structured_outputs={"json_object": True})),
        eng.prepare(eng.encode(chat(smol, "What is the bakery's phone number?")),
                    SamplingParams(max_tokens=32, structured_outputs={"regex": PHONE})),
        eng.prepare(eng.encode(chat(smol, "Which city is the capital of Italy?")),
                    SamplingParams(max_tokens=32, structured_outputs={"choice": choices})),
    ])
    assert obj.finish_reason in ("stop", "eos") and isinstance(json.loads(obj.text), dict), obj.text
    assert re.fullmatch(PHONE, phone.text) and phone.finish_reason == "stop", phone.text
    assert choice.text in choices and choice.finish_reason == "stop", choice.text


def test_a_constrained_row_is_the_same_alone_and_beside_others(smol) -> None:
    eng = engine(smol)
    params = SamplingParams(max_tokens=40, logprobs=3, structured_outputs={"json": PERSON})
    prompt = eng.encode(chat(smol, "Describe a poet as JSON with name, age and job."))
    alone = run(eng, [eng.prepare(prompt, params)])[0]
    others = [eng.prepare(eng.encode(p), SamplingParams(max_tokens=30)) for p in PROMPTS[:2]]
    other_grammar = eng.prepare(eng.encode(chat(smol, "A phone number?")),
                                SamplingParams(max_tokens=20, structured_outputs={"regex": PHONE}))
    beside = run(eng, [others[0], eng.prepare(prompt, params), other_grammar, others[1]])[1]
    assert beside.tokens == alone.tokens and beside.logprobs == alone.logprobs and beside.text == alone.text


class Kept:
    """A session wrapper that keeps every logits array it returns, and a copy of it as returned."""

    def __init__(self, session) -> None:
        self.session, self.dims, self.given = session, session.dims, []

    def run(self, inputs):
        out = self.session.run(inputs)
        self.given.append((out["logits"], out["logits"].copy()))
        return out


def test_a_grammar_masks_a_copy_of_its_row_not_the_sessions_logits(smol) -> None:
    """The engine reads a step's logits in place; a grammar's mask must not write into the session's array (a
    session may keep it, as a card's output buffer or the zero-cost bench session does)."""
    model, tokenizer = smol
    kept = Kept(CpuKVSession.of(model, Dims(1, 16, 256, model.config.vocab_size, 2), "fp32"))
    eng = Engine(kept, tokenizer, eos_ids(model, tokenizer))
    seqs = [eng.prepare(eng.encode(chat(smol, "A phone number?")),
                        SamplingParams(max_tokens=12, structured_outputs={"regex": PHONE})),
            eng.prepare(eng.encode(PROMPTS[0]), SamplingParams(max_tokens=12))]
    run(eng, seqs)
    assert re.fullmatch(PHONE, seqs[0].text) or seqs[0].finish_reason == "length"
    assert len(kept.given) > 10 and all(np.array_equal(out, copy) for out, copy in kept.given)


@pytest.mark.parametrize(("spec", "needle"), [
    ({"regex": "("}, "cannot be compiled"),
    ({"json": {"type": "no-such-type"}}, "cannot be compiled"),
    ({"json": "{not json"}, "must be a JSON schema"),
    ({"grammar": "start: 'a'"}, "grammar is not supported"),
    ({"json": PERSON, "regex": "a"}, "it sets 2 of them"),
    ({"json_object": "yes"}, "json_object must be true"),
    ({"choice": ["a", ""]}, "choice must be a list of 1 to 256 non-empty strings"),
    ({"choice": "a"}, "choice must be a list"),
])
def test_a_grammar_that_cannot_compile_is_refused_before_anything_runs(smol, spec, needle) -> None:
    eng = engine(smol)
    with pytest.raises(BadRequest, match=needle):
        eng.prepare(eng.encode("Hi"), SamplingParams(structured_outputs=spec))
    with pytest.raises(BadRequest, match="takes no min_tokens"):
        eng.prepare(eng.encode("Hi"), SamplingParams(min_tokens=4, structured_outputs={"json_object": True}))
    with pytest.raises(BadRequest, match="takes no structured_outputs"):
        eng.prepare(eng.encode("Hi"), SamplingParams(structured_outputs={"json_object": True}), forced=[42])
    assert not eng.has_work()


def test_without_the_grammar_library_a_grammar_request_is_refused(smol, monkeypatch) -> None:
    eng = engine(smol)
    monkeypatch.setitem(sys.modules, "llguidance", None)  # import llguidance raises ImportError
    with pytest.raises(BadRequest, match="structured_outputs needs llguidance, which this model's Python"):
        eng.prepare(eng.encode("Hi"), SamplingParams(structured_outputs={"json_object": True}))
    assert eng.generate(["Hi"], SamplingParams(max_tokens=2))[0].finish_reason == "length"  # the rest is served
