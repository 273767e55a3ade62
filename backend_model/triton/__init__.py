"""The Triton glue behind ``triton_model`` (the entry every model's ``model.py`` imports): a request's ``inputs``,
read and checked; ``serving``, the engine and response threads; ``heap``, the stub's heap while a model loads."""
