"""What a request's ``model`` names (:class:`Served`): a served model, or a LoRA adapter of one, as vLLM serves
adapters under their own names. An adapter is its base model asked with the adapter's name as the ``lora_name``
control; adapter names are unique on a server, so a name finds one base. An unknown name is a 404 naming every
model and adapter served.
"""

from __future__ import annotations

from dataclasses import dataclass

from console.clients import ModelInfo

from .errors import APIError
from .protocol import Upstream


@dataclass(frozen=True)
class Target:
    """The served model a request goes to, and the adapter it asks for ("": the base model's own weights)."""

    info: ModelInfo
    adapter: str = ""

    @property
    def name(self) -> str:
        """The name the request gave: the adapter's, else the model's."""
        return self.adapter or self.info.name


def names(infos: list[ModelInfo]) -> list[str]:
    """Each model's name followed by its adapters' names."""
    return [name for info in infos for name in (info.name, *info.adapters)]


def not_served(model: str, infos: list[ModelInfo]) -> APIError:
    served = ", ".join(names(infos)) or "no ready model"
    return APIError(404, f"model {model[:60]!r} is not served here (served: {served})", "model", "model_not_found")


class Served:
    """The names ``upstream`` serves; the base of each adapter found is kept, so a request for an adapter costs
    what one for its base does."""

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream
        self.bases: dict[str, str] = {}  # adapter -> its base model, as last found

    async def target(self, model: str) -> Target:
        """The model or adapter named ``model``; APIError 404 naming those served."""
        base = self.bases.get(model)
        if base is not None:
            try:
                info = await self.upstream.info(base)
            except APIError:
                info = None
            if info is not None and model in info.adapters:
                return Target(info, model)
            del self.bases[model]
        try:
            return Target(await self.upstream.info(model))
        except APIError as exc:
            if exc.status != 404:
                raise
        infos = await self.upstream.models()
        self.bases.update({adapter: info.name for info in infos for adapter in info.adapters})
        if model in self.bases:
            return Target(next(info for info in infos if info.name == self.bases[model]), model)
        raise not_served(model, infos)

    async def only(self) -> Target:
        """The one model served (its own weights), when a request names none; 400 naming the served ones otherwise."""
        infos = await self.upstream.models()
        if len(infos) != 1:
            served = ", ".join(names(infos)) or "none"
            raise APIError(400, f"model is required unless exactly one model is served (served: {served})", "model")
        return Target(infos[0])
