"""The language QPC of a vision-language model on the card, as QEfficient's ``VisionLanguageGeneration`` runs it.

A prefill chunk of a prompt with images sets the ``vision_embeds`` buffer (the vision QPC's output) and sends
``image_idx``; after it the buffer is skipped again, so decode steps (``image_idx`` 0) keep what the card retained.
Every ``*_RetainedState`` output stays on the card. Written against QEfficient's API; not run here (no card).
"""

from __future__ import annotations

import numpy as np

from ..sessions.qaic import Opener, QaicSession, open_qpc

VISION_BUFFER = "vision_embeds"


class QaicLanguageSession(QaicSession):
    """A dual-QPC (``kv_offload``) language QPC behind the session contract."""

    def __init__(self, qpc_path: str, device_ids: list[int] | None = None, opener: Opener = open_qpc) -> None:
        super().__init__(qpc_path, device_ids, opener)
        names = list(self.session.input_names) + list(self.session.output_names)
        self.session.skip_buffers([n for n in names if n.endswith("_RetainedState") or n == VISION_BUFFER])
        self.takes_index = "image_idx" in self.session.input_names

    def run(self, inputs: dict) -> dict:
        inputs = dict(inputs)
        embeds = inputs.pop(VISION_BUFFER, None)
        if self.takes_index:
            inputs.setdefault("image_idx", np.zeros((1, 1), dtype=np.int64))
        else:
            inputs.pop("image_idx", None)
        if embeds is None:
            return super().run(inputs)
        self.session.set_buffers({VISION_BUFFER: np.asarray(embeds, dtype=np.float32)})
        try:
            return super().run(inputs)
        finally:
            self.session.skip_buffers([VISION_BUFFER])
