"""Is a request still running? :func:`ask_status` is the probe of a call to the bundled backend that went quiet:
it asks the model (its ``status_of`` input) over the call's own protocol (a stream over gRPC, HTTP through the
generate endpoint).

The answer tells a slow model from a dead one: the backend says ``running``; a model reloaded after
its backend died does not know the request (``unknown``); a dead backend is refused by Triton
("Stub process ... is not healthy").
"""

from __future__ import annotations

import queue
from typing import TYPE_CHECKING, Any

from .errors import ClientError, ServerFault
from .wire import is_final, post_generate, tensor, text

if TYPE_CHECKING:
    from .call import Call

NOT_HEALTHY = "is not healthy"


def ask_status(call: Call) -> None:
    """The probe (:data:`~.call.Probe`) of a quiet call to the bundled backend: ClientError when the request is
    lost (the backend died, or was reloaded and no longer knows it)."""
    key = call.params.status_key or ""
    if request_status(call.url, call.model, call.request_id, key, protocol=call.protocol) == "unknown":
        raise lost_request(call.model)


def request_status(url: str, model: str, request_id: str, key: str, timeout: float = 3.0,
                   protocol: str = "grpc") -> str | None:
    """``running`` or ``unknown``; None when the question got no answer in time (nothing is known).

    ClientError when Triton says the model's backend is dead.
    """
    ask = _ask_http if protocol == "http" else _ask_grpc
    answer, error = ask(url, model, {"status_of": request_id, "status_key": key}, timeout)
    if error is not None and NOT_HEALTHY in error:
        raise ServerFault(f"the backend of {model} died ({error}): this request is lost; a console "
                          "that started the server reloads the model, else restart tritonserver")
    return answer


def _ask_grpc(url: str, model: str, question: dict[str, str], timeout: float) -> tuple[str | None, str | None]:
    """(the answer, Triton's error message) over a gRPC stream."""
    import tritonclient.grpc as grpcclient

    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    try:
        client.start_stream(callback=lambda result=None, error=None: answers.put((result, error)))
        inputs = [tensor(grpcclient, name, "BYTES", [value]) for name, value in question.items()]
        client.async_stream_infer(model, inputs, enable_empty_final_response=True)
        while True:
            result, error = answers.get(timeout=timeout)
            if error is not None:
                return None, error.message() if hasattr(error, "message") else str(error)
            answer = result.as_numpy("text_output")
            if answer is not None and answer.size:
                return text(answer.reshape(-1)[0]), None
            if is_final(result):
                return None, None
    except queue.Empty:
        return None, None
    finally:
        client.stop_stream(cancel_requests=True)
        client.close()


def _ask_http(url: str, model: str, question: dict[str, str], timeout: float) -> tuple[str | None, str | None]:
    """(the answer, Triton's error message) from the generate endpoint."""
    try:
        status, reason, data = post_generate(url, model, question, timeout)
    except OSError:  # no answer in time: nothing is known
        return None, None
    if status != 200:
        return None, str(data.get("error", reason))
    answer = data.get("text_output")
    return (answer[0] if isinstance(answer, list) and answer else answer or None), None


def lost_request(model: str) -> ClientError:
    """The failure of a request the model no longer knows."""
    return ServerFault(f"{model} no longer knows this request: its backend was restarted while it ran (the stub "
                       "died and the model was reloaded); send it again")
