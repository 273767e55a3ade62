"""The card's sampler: QEfficient's on-device sampling (``include_sampler``) in numpy.

A QPC compiled with QEfficient's ``qaic_config={"include_sampler": True, "max_top_k_ids": K}`` takes a row's
sampler inputs with its tokens and returns the row's next token, not its logits (``sampler_forward`` in
``QEfficient/transformers/sampler/sampler.py``): a repetition penalty on every token of the prompt and the reply
so far, a presence penalty on the reply's tokens, the argmax where the temperature is 0; else the temperature, then
top-k (at most K), top-p and min-p over the K largest logits, and a Gumbel-max draw with the ``random_numbers``
input (K uniform numbers in [0, 1) a row). :func:`sample` is that computation. The twin runs it as the card's
program (:mod:`..twin.sampler`); a compiled model whose QPC has no sampler runs it on the host
(:class:`CardSampler`) on the same random numbers, so a seeded request gives the same tokens on both paths.

QEfficient's example sends one draw for a whole generation; a request here draws K fresh numbers for each token
from its seed's generator (none for a greedy request), on either path.
"""

from __future__ import annotations

from typing import Dict

import numpy as np

from .sampling import SamplingParams

OPS = ("repetition_penalties", "presence_penalties", "temperatures", "top_ks", "top_ps", "min_ps", "random_numbers")
INPUTS = OPS + ("last_accepted_output_tokens",)  # a sampling QPC's inputs besides the model's (QEfficient's check)
RETAINED = ("past_repetition_penalty_buffer", "past_presence_penalty_buffer")  # [rows, vocab] bool, kept on the card
OUTPUT = "next_tokens"  # [batch, 1, 1] int64: what a sampling QPC returns instead of logits
MASKED = float(np.finfo(np.float16).min)  # what QEfficient writes over a logit the filters drop
Inputs = Dict[str, np.ndarray]  # typing.Dict: evaluated at run time, so 3.8-safe


def row_inputs(params: SamplingParams, random_numbers: np.ndarray, top_k: int) -> Inputs:
    """One row's sampler inputs ([1, 1] each, ``random_numbers`` [1, K]). Top-k 0 (all) is the card's K."""
    values = {"repetition_penalties": params.repetition_penalty, "presence_penalties": 0.0,
              "temperatures": params.temperature, "top_ps": params.top_p, "min_ps": 0.0}
    row = {name: np.full((1, 1), value, dtype=np.float32) for name, value in values.items()}
    row["top_ks"] = np.full((1, 1), min(params.top_k or top_k, top_k), dtype=np.int32)
    row["random_numbers"] = random_numbers.reshape(1, -1).astype(np.float32)
    return row


def idle(top_k: int) -> Inputs:
    """The inputs of a row whose token is not taken (padding, an idle slot): greedy, no penalty."""
    return row_inputs(SamplingParams(), np.full(top_k, 0.5), top_k)


def stack(rows: list[Inputs]) -> Inputs:
    """One run's sampler inputs from its rows'."""
    return {name: np.concatenate([row[name] for row in rows]) for name in OPS}


def sample(logits: np.ndarray, repeated: np.ndarray, present: np.ndarray, inputs: Inputs, top_k: int) -> np.ndarray:
    """Each row's next token [R] from its logits [R, V], its repetition and presence masks [R, V] (bool) and its
    sampler inputs, as the card's sampler computes it with ``max_top_k_ids`` ``top_k``."""
    logits = np.asarray(logits, dtype=np.float32).copy()
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        penalties = inputs["repetition_penalties"]
        if (penalties != 1.0).any():  # a positive logit is divided by the penalty, a negative one multiplied
            logits *= np.where(repeated, penalties, np.float32(1.0)) ** -np.sign(logits)
        presence = inputs["presence_penalties"]
        if (presence != 0.0).any():
            logits -= presence * present
        greedy = logits.argmax(1)
        temperatures = inputs["temperatures"]
        if (temperatures == 0).all():
            return greedy
        scaled = np.where(temperatures != 0, logits / np.where(temperatures != 0, temperatures, 1), logits)
        k = min(top_k, logits.shape[1])
        ascending = _largest(scaled, k)[:, ::-1]  # the K largest, smallest first
        values = np.take_along_axis(scaled, ascending, 1).astype(np.float32)
        kept = np.minimum(inputs["top_ks"].astype(np.int64), k)
        values[np.arange(k)[None, :] < k - kept] = MASKED
        probs = _softmax(values)
        beyond_p = np.cumsum(probs, 1) <= 1 - inputs["top_ps"]
        beyond_p[:, -1] = False  # the most likely token stays
        values[beyond_p] = MASKED
        min_ps = inputs["min_ps"]
        if (min_ps != 0.0).any():
            values[probs < min_ps * probs[:, -1:]] = MASKED
        noise = -np.log(-np.log(inputs["random_numbers"][:, :k].astype(np.float32)))
        drawn = np.take_along_axis(ascending, (values + noise).argmax(1)[:, None], 1)[:, 0]
    return np.where(temperatures[:, 0] == 0, greedy, drawn)


def _largest(values: np.ndarray, k: int) -> np.ndarray:
    """The indices of each row's ``k`` largest values, largest first."""
    top = np.argpartition(-values, k - 1, axis=1)[:, :k] if k < values.shape[1] else np.indices(values.shape)[1]
    order = np.argsort(-np.take_along_axis(values, top, 1), axis=1, kind="stable")
    return np.take_along_axis(top, order, 1)


def _softmax(values: np.ndarray) -> np.ndarray:
    shifted = np.exp(values - values.max(1, keepdims=True))
    return (shifted / shifted.sum(1, keepdims=True)).astype(np.float32)


class CardSampler:
    """One sequence's sampling as the card does it: its sampler inputs for each token (``inputs``; random numbers
    from its seed's generator), and the host's run of the card's sampler on them (``__call__``)."""

    def __init__(self, params: SamplingParams, top_k: int) -> None:
        self.params = params
        self.top_k = top_k
        self.rng = np.random.default_rng(params.seed)

    def inputs(self) -> Inputs:
        """The sampler inputs of this sequence's next token (K fresh random numbers when it samples)."""
        if self.params.temperature == 0:
            return row_inputs(self.params, np.full(self.top_k, 0.5), self.top_k)
        return row_inputs(self.params, self.rng.random(self.top_k, dtype=np.float32), self.top_k)

    def __call__(self, logits: np.ndarray, seen: list[int]) -> int:
        """The next token from a logits row; ``seen``: the prompt and reply tokens the repetition penalty takes."""
        repeated = np.zeros((1, len(logits)), dtype=bool)
        repeated[0, np.asarray(seen, dtype=np.int64)] = True
        return int(sample(logits[None], repeated, np.zeros_like(repeated), self.inputs(), self.top_k)[0])
