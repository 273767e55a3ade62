"""Vision encoders: a processor's image inputs -> the embeddings the language model takes (``vision_embeds``).

On the CPU the model's own vision tower and projector (``get_image_features``, what its forward calls); on a card
the vision QPC as QEfficient's ``VisionLanguageGeneration`` runs it (``pixel_values`` in float16, its retained
state skipped). Both return an array [images or 1, tokens, hidden].
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

# the vision QPC's inputs among a processor's outputs, and those QEfficient sends in float16
# (QEfficient/transformers/models/modeling_auto.py, kv_offload_generate)
VISION_INPUTS = ("pixel_values", "image_masks", "image_position_ids", "image_input_idx", "valid_idx",
                 "aspect_ratio_ids", "aspect_ratio_mask")
HALF_INPUTS = ("pixel_values", "image_masks")


class TorchVisionEncoder:
    """The model's own vision tower and projector in torch."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def __call__(self, vision: dict[str, Any]) -> np.ndarray:
        import torch

        dtype = self.model.dtype
        inputs = {k: v.to(dtype) if torch.is_floating_point(v) else v for k, v in vision.items()}
        with torch.inference_mode():
            out = self.model.get_image_features(**inputs)
        features = getattr(out, "pooler_output", out)
        if isinstance(features, (list, tuple)):  # one tensor per image (or per tile)
            features = torch.cat([f.reshape(-1, f.shape[-1]) for f in features])
        return features.reshape(1, -1, features.shape[-1]).float().numpy()


class QaicVisionEncoder:
    """The vision QPC on the card (``QAICInferenceSession``); written against QEfficient's API, not run here."""

    def __init__(self, qpc_path: str, device_ids: list[int] | None = None) -> None:
        from ..contract.qpc import find_qpc, open_session

        self.session = open_session(find_qpc(Path(qpc_path).expanduser()), device_ids)
        names = list(self.session.input_names) + list(self.session.output_names)
        self.session.skip_buffers([n for n in names if n.endswith("_RetainedState")])

    def __call__(self, vision: dict[str, Any]) -> np.ndarray:
        inputs = {}
        for name in VISION_INPUTS:
            if name in vision and name in self.session.input_names:
                value = np.asarray(vision[name])
                inputs[name] = value.astype(np.float16) if name in HALF_INPUTS else value
        return np.asarray(self.session.run(inputs)["vision_embeds"])
