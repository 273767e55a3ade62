"""The ``config.pbtxt`` parameters of a model folder: the generator writes them, the backend reads them.

Standard library only: the generator, which may run under a bare Python 3.8, imports this module.
"""

ENGINES = ("auto", "qaic", "cpu", "onnx")
IMAGE_TEXT_TO_TEXT = "image_text_to_text"  # the ``task`` of a vision-language model (images in, text out)
DEFAULT_MAX_IMAGES = 1  # images a request may bring, unless ``max_images`` says more
PRECISIONS = ("fp32", "bf16", "int8", "int4")  # the CPU engine's weights (cpu_kernels.DTYPES)
# Precisions whose greedy answer can change with the requests sharing a decode step (cpu_kernels says why);
# repo list, the model's log line and the generator's --help say so, and no sample uses them.
VARIES_WITH_BATCH = {"int8": "varies with batch: its activations are quantised per decode step, neighbours included"}


def precision_label(precision: str) -> str:
    """The precision as listings show it: marked when its answers vary with the batch."""
    return f"{precision} (varies with batch)" if precision in VARIES_WITH_BATCH else precision


TRUE = ("true", "1", "yes")
BOOLEANS = TRUE + ("false", "0", "no")  # what ``use_kv_cache`` accepts
