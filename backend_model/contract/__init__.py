"""The model folder's contract, shared by the backend and the generator: standard library only, Python 3.8.

Errors, the ``config.pbtxt`` parameters, the controls' schema, ``compile_config.json``, which CPU session serves a
model, a QPC on disk and its ``specializations.json``, the card's devices. The release artifacts' generator ships
this sub-package beside it (``repo_gen.artifacts``)."""
