"""The backend's errors (standard library only: the generator and the controls' schema share them)."""


class SessionError(RuntimeError):
    """A session cannot be created or run (missing runtime, bad model, bad shapes)."""


class BadRequest(ValueError):
    """A request the backend refuses, with a one-line message meant for the client."""


# A model's error reaches a client on Triton's gRPC stream as a message only (the stream carries no status), so the
# backend's own failures (not the request's) begin with one of these words: their code, read by :func:`server_fault`.
GENERATION_FAILED = "generation failed"  # the engine failed while generating
READ_FAILED = "the model failed"  # a bug of the backend's while reading a request
SERVER_FAULTS = (GENERATION_FAILED, READ_FAILED)


def server_fault(message: str) -> bool:
    """Whether the backend's error ``message`` is its own failure (else the request's fault)."""
    return message.startswith(SERVER_FAULTS)
