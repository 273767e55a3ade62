"""A request in flight: iterate it once for its events; :meth:`Call.cancel` may come from any thread."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from .errors import ClientError
from .events import Event, Failure, ModelInfo, Reply, Timeouts, new_request_id
from .interfaces import Interface, interface_of
from .params import GenerationParams
from .wire import model_info, normalize_url


class Call:
    """One request to ``model`` (a name, or its :class:`ModelInfo` when already read) at ``url``."""

    protocol = "grpc"

    def __init__(self, url: str, model: str | ModelInfo, prompts: Sequence[str], params: GenerationParams,
                 timeouts: Timeouts) -> None:
        if not prompts:
            raise ClientError("no prompt given")
        self.url = normalize_url(url)
        self.info = model if isinstance(model, ModelInfo) else None
        self.model = model.name if isinstance(model, ModelInfo) else model
        self.prompts = list(prompts)
        self.params = params
        self.request_id = params.request_id or new_request_id()
        self.timeouts = timeouts
        self._cancel = threading.Event()
        self._queue: queue.Queue[Any] = queue.Queue()
        self._used = False

    def model_info(self) -> ModelInfo:
        """The model's config (read once, over this call's protocol)."""
        if self.info is None:
            limit = min(self.timeouts.network or 10.0, 10.0)
            self.info = model_info(self.url, self.model, self.protocol, timeout=limit)
        return self.info

    def interface(self) -> Interface:
        return interface_of(self.model_info())

    def cancel(self) -> None:
        """Stop waiting and cancel the request (on the server too, where the protocol can)."""
        self._cancel.set()
        self._queue.put(None)

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def __iter__(self) -> Iterator[Event]:
        if self._used:
            raise RuntimeError("a Call can be iterated once")
        self._used = True
        return self._events()

    def _events(self) -> Iterator[Event]:
        raise NotImplementedError

    def replies(self) -> list[Reply]:
        """Run to the end; the replies in prompt order, or ClientError on failure."""
        replies = []
        for event in self:
            if isinstance(event, Failure):
                raise ClientError(event.message, event.kind)
            if isinstance(event, Reply):
                replies.append(event)
        return replies
