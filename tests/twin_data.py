"""What the card-twin tests share: the bench report's first 8 prompts, tokens per prompt, the compiled ctx_len."""

from console.bench.engine import BENCH_PROMPTS

PROMPTS = BENCH_PROMPTS[:8]
TOKENS = 32
CTX_LEN = 64
VOCAB = 49152
