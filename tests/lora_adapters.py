"""Tiny real LoRA adapters of the embedded SmolLM2, made with ``peft``: a few training steps on a few sentences, so
their greedy answers differ visibly from the base's (A says ``pineapple``; B, trained on ``volcano``, babbles), and
the merged models (``merge_and_unload()``) that are their references."""

from __future__ import annotations

from pathlib import Path

import torch

from backend_model.models import load_pretrained

PROMPT = "My favourite word is"
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]
WORDS = {"A": "pineapple", "B": "volcano"}
STEPS = 8  # about 2 s each on one thread (more threads on a busy 2-core machine: 15 s each)


def _quiet(_: str) -> None:
    pass


def base_model():
    """A fresh fp32 copy of the embedded model and its tokenizer."""
    return load_pretrained("embedded", progress=_quiet)


def train(word: str, folder: Path) -> Path:
    """An adapter (rank 4 on q/k/v/o) trained until the embedded model's favourite word is ``word``."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    model, tokenizer = base_model()
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS, lora_dropout=0.0))
    texts = [f"{PROMPT} {word}.", f"Say one word: {word}.", f"The answer is {word}."]
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    optimiser = torch.optim.AdamW([p for p in peft_model.parameters() if p.requires_grad], lr=1e-2)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a backward pass on threads that other processes share is several times slower
    try:
        for _ in range(STEPS):
            peft_model(**batch, labels=labels).loss.backward()
            optimiser.step()
            optimiser.zero_grad()
    finally:
        torch.set_num_threads(threads)
    peft_model.save_pretrained(str(folder))
    return folder


def make_adapters(root: Path) -> dict[str, Path]:
    """Adapters A and B under ``root`` (made once: a folder that holds them is used as it is)."""
    folders = {name: root / f"adapter_{name}" for name in WORDS}
    for name, folder in folders.items():
        if not (folder / "adapter_model.safetensors").is_file():
            train(WORDS[name], folder)
    return folders


def merged_answer(folder: Path | None, prompt: str, max_tokens: int) -> list[int]:
    """The greedy tokens of the base merged with the adapter in ``folder`` (None: the base), alone, in fp32, by
    transformers' own ``generate``."""
    from peft import PeftModel

    model, tokenizer = base_model()
    if folder is not None:
        model = PeftModel.from_pretrained(model, str(folder)).merge_and_unload()
    ids = tokenizer(prompt, add_special_tokens=True, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        out = model.generate(ids, max_new_tokens=max_tokens, do_sample=False, pad_token_id=tokenizer.eos_token_id)
    return out[0, ids.shape[1]:].tolist()
