"""One read of a server's Prometheus metrics page, parsed by ``prometheus_client``'s parser.

A :class:`Scrape` answers by metric family (the name without a counter's ``_total``, as the parser keys them) and
model: a counter's or gauge's value summed over the other labels, a histogram's sum and count. A model is named by
its ``model`` label (Triton's and this backend's) or ``model_name`` (vLLM's).
"""

from __future__ import annotations

import http.client
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

MODEL_LABELS = ("model", "model_name")
TIMEOUT_S = 3.0
MAX_BYTES = 8 << 20  # a metrics page larger than this is not read


class MetricsError(Exception):
    """The metrics page cannot be read or parsed (one line)."""


def metrics_endpoint(address: str) -> str:
    """``host:port`` or a URL -> the metrics page's URL (``http://host:port/metrics`` unless a path is given)."""
    address = address.strip()
    if "://" not in address:
        address = f"http://{address}"
    scheme, _, rest = address.partition("://")
    host, slash, path = rest.partition("/")
    return f"{scheme}://{host}/{path if slash and path else 'metrics'}"


def _model(labels: dict[str, str]) -> str | None:
    return next((labels[k] for k in MODEL_LABELS if k in labels), None)


@dataclass(frozen=True)
class Scrape:
    """A metrics page as read at ``at`` (``time.monotonic()``): per family, per model, the values that matter."""

    url: str
    at: float
    values: dict[tuple[str, str], float] = field(default_factory=dict)  # (family, model) -> counter/gauge value
    sums: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)  # histogram: (sum, count)
    names: frozenset[str] = frozenset()  # every family and sample name on the page
    by_instance: dict[tuple[str, str, str], float] = field(default_factory=dict)  # (family, model, instance) -> value

    @classmethod
    def parse(cls, text: str, url: str = "", at: float | None = None) -> Scrape:
        """MetricsError when ``text`` is not Prometheus text."""
        values: dict[tuple[str, str], float] = {}
        sums: dict[tuple[str, str], list[float]] = {}
        names: set[str] = set()
        by_instance: dict[tuple[str, str, str], float] = {}
        try:
            for family in text_string_to_metric_families(text):
                names.add(family.name)
                for sample in family.samples:
                    names.add(sample.name)
                    model = _model(sample.labels)
                    if model is None:
                        continue
                    key = (family.name, model)
                    if family.type == "histogram":
                        if sample.name.endswith(("_sum", "_count")):
                            pair = sums.setdefault(key, [0.0, 0.0])
                            pair[sample.name.endswith("_count")] += sample.value
                    elif sample.name in (family.name, f"{family.name}_total"):
                        values[key] = values.get(key, 0.0) + sample.value
                        if "instance" in sample.labels:  # the backend's model instances (one per device group)
                            one = (*key, sample.labels["instance"])
                            by_instance[one] = by_instance.get(one, 0.0) + sample.value
        except ValueError as exc:
            raise MetricsError(f"{url or 'the page'} is not Prometheus metrics text ({exc})") from None
        return cls(url, time.monotonic() if at is None else at, values, {k: (s, c) for k, (s, c) in sums.items()},
                   frozenset(names), by_instance)

    @classmethod
    def merge(cls, scrapes: list[Scrape]) -> Scrape:
        """Several servers' pages as one (values summed: one load spread over them)."""
        if len(scrapes) == 1:
            return scrapes[0]
        values: dict[tuple[str, str], float] = {}
        sums: dict[tuple[str, str], tuple[float, float]] = {}
        for one in scrapes:
            for key, number in one.values.items():
                values[key] = values.get(key, 0.0) + number
            for key, (total, count) in one.sums.items():
                earlier = sums.get(key, (0.0, 0.0))
                sums[key] = (earlier[0] + total, earlier[1] + count)
        by_instance: dict[tuple[str, str, str], float] = {}
        for one in scrapes:
            for place, number in one.by_instance.items():
                by_instance[place] = by_instance.get(place, 0.0) + number
        return cls(" ".join(s.url for s in scrapes), max(s.at for s in scrapes), values, sums,
                   frozenset().union(*(s.names for s in scrapes)), by_instance)

    def models(self) -> list[str]:
        return sorted({model for _, model in (*self.values, *self.sums)})

    def value(self, family: str, model: str) -> float | None:
        return self.values.get((family, model))

    def instances(self, family: str, model: str) -> dict[str, float]:
        """A counter's or gauge's value for each instance of ``model`` (its ``instance`` label), {} without any."""
        return {i: v for (f, m, i), v in sorted(self.by_instance.items()) if (f, m) == (family, model)}

    def histogram(self, family: str, model: str) -> tuple[float, float] | None:
        """(sum, count) of a histogram for ``model``."""
        return self.sums.get((family, model))


def scrape(url: str, timeout: float = TIMEOUT_S) -> Scrape:
    """Read and parse the metrics page at ``url``; MetricsError in one line when it cannot."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body = response.read(MAX_BYTES + 1)
    except urllib.error.HTTPError as exc:
        exc.close()  # its connection: now, not when the collector finds a cycle holding the error
        raise MetricsError(f"no metrics at {url} (HTTP {exc.code})") from None
    except http.client.HTTPException as exc:  # something that is not an HTTP server answers there
        raise MetricsError(f"no metrics at {url} (no HTTP answer: {type(exc).__name__})") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        said = getattr(reason, "strerror", None) or " ".join(str(reason).split())
        raise MetricsError(f"no metrics at {url} ({said[:1].lower()}{said[1:]})") from None
    if len(body) > MAX_BYTES:
        raise MetricsError(f"the metrics page at {url} is over {MAX_BYTES >> 20} MB: not read")
    return Scrape.parse(body.decode("utf-8", errors="replace"), url)
