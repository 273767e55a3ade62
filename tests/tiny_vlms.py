"""Tiny random-weight vision-language models of four families, built with transformers' own config classes and
processors (no download), on the embedded SmolLM2 tokenizer with each family's image tokens added.

Each has a two-layer language model (Llama; Cohere2 with a sliding window for Aya Vision; hidden 64) and a
two-layer vision tower (CLIP, Idefics3's, SigLIP) on 56-pixel images, so a prompt with an image is tens of tokens
(LLaVA-NeXT's tiles, Aya Vision's patch and line-break tokens, Idefics3's pixel shuffle included). Not here:
Mistral 3 (its Pixtral processor needs torchvision, not installed), Gemma 3 (an image's tokens attend to each other
both ways), Qwen2-VL (3-D rotary positions) and Mllama (cross-attention): the engine does not feed those exactly.
``save_tiny_vlm`` writes one as a Hugging Face folder (weights, config, processor, tokenizer, chat template) that a
model repository names in ``hf_model_name``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import transformers

TEXT = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 512, "bos_token_id": 1,
        "eos_token_id": 2, "pad_token_id": 2, "initializer_range": 0.2}
CLIP = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
        "patch_size": 14, "image_size": 56, "projection_dim": 32}
TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {% if m['content'] is string %}{{ m['content'] }}{% else %}"
            "{% for c in m['content'] %}{% if c['type'] == 'image' %}IMAGE{% else %}{{ c['text'] }}{% endif %}"
            "{% endfor %}{% endif %}\n{% endfor %}assistant:")
MEAN = {"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}
FAMILIES = ("llava", "llava_next", "idefics3", "aya_vision")


def _tokenizer(base: Any, tokens: list[str]) -> Any:
    tokenizer = transformers.AutoTokenizer.from_pretrained(base.name_or_path)
    tokenizer.add_special_tokens({"additional_special_tokens": tokens})
    return tokenizer


def _llava(base: Any) -> tuple[Any, Any]:
    tokenizer = _tokenizer(base, ["<image>"])
    config = transformers.LlavaConfig(
        vision_config=transformers.CLIPVisionConfig(**CLIP),
        text_config=transformers.LlamaConfig(vocab_size=len(tokenizer), **TEXT),
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"), vision_feature_layer=-1)
    images = transformers.CLIPImageProcessor(size={"shortest_edge": 56}, crop_size={"height": 56, "width": 56}, **MEAN)
    processor = transformers.LlavaProcessor(images, tokenizer, patch_size=14, vision_feature_select_strategy="default",
                                            num_additional_image_tokens=1,
                                            chat_template=TEMPLATE.replace("IMAGE", "<image>"))
    return transformers.LlavaForConditionalGeneration(config), processor


def _llava_next(base: Any) -> tuple[Any, Any]:
    tokenizer = _tokenizer(base, ["<image>"])
    config = transformers.LlavaNextConfig(
        vision_config=transformers.CLIPVisionConfig(**CLIP),
        text_config=transformers.LlamaConfig(vocab_size=len(tokenizer), **TEXT),
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"), image_grid_pinpoints=[[56, 56], [56, 112]],
        vision_feature_layer=-1)
    images = transformers.LlavaNextImageProcessor(size={"shortest_edge": 56}, crop_size={"height": 56, "width": 56},
                                                  image_grid_pinpoints=[[56, 56], [56, 112]], **MEAN)
    processor = transformers.LlavaNextProcessor(images, tokenizer, patch_size=14,
                                                vision_feature_select_strategy="default",
                                                num_additional_image_tokens=1,
                                                chat_template=TEMPLATE.replace("IMAGE", "<image>"))
    return transformers.LlavaNextForConditionalGeneration(config), processor


def _idefics3(base: Any) -> tuple[Any, Any]:
    tokenizer = _tokenizer(base, ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>"])
    config = transformers.Idefics3Config(
        vision_config=transformers.Idefics3VisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                                        num_attention_heads=2, patch_size=14, image_size=56),
        text_config=transformers.LlamaConfig(vocab_size=len(tokenizer), **TEXT),
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"), scale_factor=2)
    images = transformers.Idefics3ImageProcessor(do_image_splitting=False, size={"longest_edge": 56},
                                                 max_image_size={"longest_edge": 56}, **MEAN)
    processor = transformers.Idefics3Processor(images, tokenizer, image_seq_len=4,
                                               chat_template=TEMPLATE.replace("IMAGE", "<image>"))
    return transformers.Idefics3ForConditionalGeneration(config), processor


def _aya_vision(base: Any) -> tuple[Any, Any]:
    specials = ["<image>", "<|START_OF_IMG|>", "<|END_OF_IMG|>", "<|IMG_PATCH|>", "<|IMG_LINE_BREAK|>", "TILE",
                "TILE_GLOBAL"]
    tokenizer = _tokenizer(base, specials)
    text = {k: v for k, v in TEXT.items() if k != "head_dim"}
    config = transformers.AyaVisionConfig(
        vision_config=transformers.SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                                      num_attention_heads=2, patch_size=14, image_size=56),
        text_config=transformers.Cohere2Config(vocab_size=len(tokenizer), sliding_window=8,
                                               layer_types=["sliding_attention", "full_attention"], **text),
        image_token_index=tokenizer.convert_tokens_to_ids("<|IMG_PATCH|>"), downsample_factor=2)
    images = transformers.GotOcr2ImageProcessor(size={"height": 56, "width": 56}, crop_to_patches=False, **MEAN)
    processor = transformers.AyaVisionProcessor(images, tokenizer, patch_size=14, img_size=56, downsample_factor=2,
                                                chat_template=TEMPLATE.replace("IMAGE", "<image>"))
    return transformers.AyaVisionForConditionalGeneration(config), processor


BUILDERS = {"llava": _llava, "llava_next": _llava_next, "idefics3": _idefics3, "aya_vision": _aya_vision}


def save_tiny_vlm(family: str, folder: Path, tokenizer: Any, seed: int = 0) -> Path:
    """Write the family's tiny model, its processor and tokenizer into ``folder``; the folder."""
    torch.manual_seed(seed)
    model, processor = BUILDERS[family](tokenizer)
    model.eval().save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder
