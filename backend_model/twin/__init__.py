"""The card's twin: a QEfficient ONNX graph on ONNX Runtime behind the QAIC session's surface (``session``), the
graph made ready as the card runs it (``graph``), its weights left where they lie in the file (``weights``)."""
