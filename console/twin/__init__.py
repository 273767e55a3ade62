"""The card's twin from the console: ``qaic-console onnx export`` and ``qaic-console check``."""
