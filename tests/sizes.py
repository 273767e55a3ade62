"""The sizes users have: terminals and browser windows the TUI and web tests are measured at, where their screenshots
go (the tests' artifacts: ``QAIC_TEST_ARTIFACTS``, default ``out/test-artifacts``), and a metrics page that fills the
consoles' metrics tables as a served model would."""

from __future__ import annotations

import http.server
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from helpers import ROOT, send

TERMINALS = ((120, 40), (160, 45))  # columns, rows
WINDOWS = ((1280, 800), (1920, 1080))  # px
Box = tuple[float, float, float, float]  # left, top, right, bottom


def artifacts() -> Path:
    """The folder screenshots go to (made)."""
    folder = Path(os.environ.get("QAIC_TEST_ARTIFACTS", ROOT / "out" / "test-artifacts"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def overlap(a: Box, b: Box) -> bool:
    """Whether two boxes share any area."""
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def metrics_text(models: Sequence[str], reads: int) -> str:
    """A Prometheus page of the bundled backend's figures for ``models`` after ``reads`` reads (its counters grow by
    a busy second's worth each read, so two reads give every column of the metrics table a value)."""
    lines = []
    for model in models:
        at = f'model="{model}",version="1"'
        counters = {"nv_inference_request_success": 12, "nv_inference_queue_duration_us": 18_000,
                    "nv_inference_compute_infer_duration_us": 2_400_000, "qaic_generation_tokens_total": 1_280,
                    "qaic_decode_step_sequences_total": 1_280}
        for name, per_read in counters.items():
            lines += [f"# TYPE {name} counter", f"{name}{{{at}}} {per_read * reads}"]
        lines += [f"qaic_num_requests_running{{{at}}} 3", f"qaic_num_requests_waiting{{{at}}} 12",
                  f"qaic_slots{{{at}}} 4"]
        histograms = {"qaic_request_slot_wait_seconds": (1.5, 12), "qaic_request_step_wait_seconds": (0.25, 12),
                      "qaic_time_to_first_token_seconds": (2.75, 12), "qaic_decode_step_seconds": (4.0, 320)}
        for name, (total, count) in histograms.items():
            lines += [f"# TYPE {name} histogram", f"{name}_sum{{{at}}} {total * reads}",
                      f"{name}_count{{{at}}} {count * reads}", f'{name}_bucket{{{at},le="+Inf"}} {count * reads}']
    return "\n".join(lines) + "\n"


@contextmanager
def metrics_page(models: Sequence[str]) -> Iterator[str]:
    """A metrics page for ``models`` served on loopback: its URL."""
    reads = [0]

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            reads[0] += 1
            send(self, metrics_text(models, reads[0]).encode(), "text/plain; version=0.0.4")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
