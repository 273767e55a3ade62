"""The embedded vision sample's model: the embedded SmolLM2 as the language model of a LLaVA whose vision tower
(a small CLIP, 112-pixel images, 64 embeddings each) and projector have seeded random weights.

It exists so a new user can send images without a download: its answers are SmolLM2's, steered by the image's
embeddings (scaled to the spread of its token embeddings), but the untrained tower sees nothing, so they do not
describe the image. Built once into the cache
beside the embedded model (keyed by its folder and this module's version), like ``models.prepare_embedded``.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

VERSION = "1"
SEED = 0
IMAGE_TOKEN = "<image>"
IMAGE_SIDE, PATCH = 112, 14
# SmolLM2's chat format, with image parts (the model's own template takes text only)
TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}"
            "{% else %}{% for c in m['content'] %}{% if c['type'] == 'image' %}" + IMAGE_TOKEN + "{% else %}"
            "{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def prepare_embedded_vision(text: Path, progress: Callable[[str], None]) -> Path:
    """The sample's folder, built from the embedded model's prepared folder ``text`` on first use."""
    key = hashlib.sha256(f"{text.resolve()}|{VERSION}".encode()).hexdigest()[:12]
    folder = text.parent / f"smollm2-vision-{key}"
    if (folder / "config.json").is_file():
        return folder
    with open(folder.parent / (folder.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # several model instances may start at once
        if (folder / "config.json").is_file():
            return folder
        progress("building the embedded vision sample (once: SmolLM2 with a random vision tower) ...")
        tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
        try:
            _build(text, tmp)
            os.replace(tmp, folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return folder


def _build(text: Path, out: Path) -> None:
    import torch
    from transformers import (
        AutoModelForCausalLM,
        AutoTokenizer,
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )

    tokenizer = AutoTokenizer.from_pretrained(text)
    tokenizer.add_special_tokens({"additional_special_tokens": [IMAGE_TOKEN]})
    language = AutoModelForCausalLM.from_pretrained(text, dtype=torch.float32)
    torch.manual_seed(SEED)
    language.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    vision = CLIPVisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                              image_size=IMAGE_SIDE, patch_size=PATCH, projection_dim=64)
    config = LlavaConfig(vision_config=vision, text_config=language.config, vision_feature_layer=-1,
                         image_token_index=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
                         vision_feature_select_strategy="default",
                         tie_word_embeddings=language.config.tie_word_embeddings)
    model = LlavaForConditionalGeneration(config)
    model.model.language_model.load_state_dict(language.model.state_dict())
    model.lm_head.load_state_dict(language.lm_head.state_dict())
    with torch.no_grad():  # the projector's output scaled to the spread of SmolLM2's token embeddings
        grey = torch.zeros(1, 3, IMAGE_SIDE, IMAGE_SIDE)
        spread = model.get_image_features(pixel_values=grey).pooler_output[0].std()
        scale = model.get_input_embeddings().weight.std() / spread
        projector = model.model.multi_modal_projector.linear_2
        projector.weight.mul_(scale)
        projector.bias.mul_(scale)
    model.generation_config = language.generation_config
    model.eval().save_pretrained(out)
    images = CLIPImageProcessor(size={"shortest_edge": IMAGE_SIDE}, crop_size={"height": IMAGE_SIDE,
                                                                              "width": IMAGE_SIDE})
    LlavaProcessor(images, tokenizer, patch_size=PATCH, vision_feature_select_strategy="default",
                   num_additional_image_tokens=1, chat_template=TEMPLATE).save_pretrained(out)
