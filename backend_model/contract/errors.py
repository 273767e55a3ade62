"""The backend's errors (standard library only: the generator and the controls' schema share them)."""


class SessionError(RuntimeError):
    """A session cannot be created or run (missing runtime, bad model, bad shapes)."""


class BadRequest(ValueError):
    """A request the backend refuses, with a one-line message meant for the client."""
