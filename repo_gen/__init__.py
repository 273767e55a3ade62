"""Writes Triton model repositories (llm_model_dir/<model>/) for the bundled QAIC backend."""
