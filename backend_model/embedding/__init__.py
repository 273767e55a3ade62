"""The bundled backend's encoders: text or token ids in, one vector per input out (model type ``embedding``).

``source`` finds the model's files (the embedded all-MiniLM-L6-v2, checked, or a folder) and reads its
sentence-transformers config; ``settings`` reads the model folder; ``encoders`` runs it (torch on the CPU, the ONNX
graph on the card's twin, QEfficient's ``QEFFAutoModel`` on a card); ``rows`` reads and checks a request's inputs;
``triton_model`` is the entry an embedding model's ``model.py`` imports (Triton's dynamic batching).
"""
