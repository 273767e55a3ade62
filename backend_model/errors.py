"""The backend's error for a session that cannot be made (standard library only: the generator shares it)."""


class SessionError(RuntimeError):
    """A session cannot be created or run (missing runtime, bad model, bad shapes)."""
