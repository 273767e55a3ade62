"""Is a request still running? A stream that went quiet asks the bundled backend (its ``status_of`` input).

The answer tells a slow model from a dead one: the backend says ``running``; a model reloaded after
its backend died does not know the request (``unknown``); a dead backend is refused by Triton
("Stub process ... is not healthy").
"""

from __future__ import annotations

import queue
from typing import Any

from .errors import SERVER, ClientError
from .wire import is_final, tensor, text

PROBE_AFTER = 3.0  # s of silence before a stream asks
PROBE_EVERY = 3.0  # s between two questions
NOT_HEALTHY = "is not healthy"


def request_status(url: str, model: str, request_id: str, timeout: float = 3.0) -> str | None:
    """``running`` or ``unknown``; None when the question got no answer in time (nothing is known)."""
    import tritonclient.grpc as grpcclient

    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    try:
        client.start_stream(callback=lambda result=None, error=None: answers.put((result, error)))
        client.async_stream_infer(model, [tensor(grpcclient, "status_of", "BYTES", [request_id])],
                                  enable_empty_final_response=True)
        while True:
            result, error = answers.get(timeout=timeout)
            if error is not None:
                message = error.message() if hasattr(error, "message") else str(error)
                if NOT_HEALTHY in message:
                    raise ClientError(f"the backend of {model} died ({message}): this request is lost; a console "
                                      "that started the server reloads the model, else restart tritonserver", SERVER)
                return None
            answer = result.as_numpy("text_output")
            if answer is not None and answer.size:
                return text(answer.reshape(-1)[0])
            if is_final(result):
                return None
    except queue.Empty:
        return None
    finally:
        client.stop_stream(cancel_requests=True)
        client.close()


def lost_request(model: str) -> ClientError:
    """The failure of a request the model no longer knows."""
    return ClientError(f"{model} no longer knows this request: its backend was restarted while it ran (the stub "
                       "died and the model was reloaded); send it again", SERVER)
