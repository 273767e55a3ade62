"""qaic-console: generate Triton model repositories, run tritonserver, chat with and benchmark LLMs."""
