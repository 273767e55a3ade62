"""The backend's errors (standard library only: the generator and the controls' schema share them)."""


class SessionError(RuntimeError):
    """A session cannot be created or run (missing runtime, bad model, bad shapes)."""


class BadRequest(ValueError):
    """A request the backend refuses, with a one-line message meant for the client."""


# The backend's own failures (not the request's) begin with these words; their Triton code (INTERNAL, where a bad
# request's is INVALID_ARG) is what a client reads to tell them apart.
GENERATION_FAILED = "generation failed"  # the engine failed while generating
READ_FAILED = "the model failed"  # a bug of the backend's while reading a request
