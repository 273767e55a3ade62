"""The bundled QAIC Python backend for Triton: session contract, generation engine, Triton glue.

This package is copied into every generated model's ``1/`` directory, so it depends only on
numpy, torch/transformers (CPU path) or QEfficient (QAIC path) — never on ``console``.
"""
