"""The sessions the engine drives (``protocol``): a QPC on the card (``qaic``), or the CPU (``cpu`` on ``cpu_kernels``
for the Llama family, ``hf`` for any model; ``threads``: how many threads they compute with)."""
