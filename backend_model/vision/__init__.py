"""Images in: a vision-language model's images decoded, preprocessed by its processor and encoded by its vision
tower (on the CPU) or its vision QPC (on a card), then fed to the one text engine as QEfficient feeds its language
QPC: ``vision_embeds`` and ``image_idx`` beside a prompt's prefill chunks."""
