"""``bench --images`` on the fake server: each request takes an image in turn and the same prompts go again as text
only, reported side by side with the images section (its ratios, the server's encoding time apart); an input file
names each prompt's own images; bad inputs and a model that takes no images fail before anything is sent."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from fake_server import FakeServer, bundled_info, with_images
from helpers import assert_one_line_error, cli

from console.bench.images import section
from console.bench.server_view import level_figures
from console.server import ServerError

MODEL = "llava"
RUN = ("--requests", "4", "--warmup", "0", "--output-tokens-mean", "3", "--input-tokens-mean", "5", "--plots",
       "html", "--json", "-q")


@pytest.fixture
def served(fake_server: FakeServer) -> FakeServer:
    fake_server.serve(replace(with_images(bundled_info(MODEL)), hf_model_name="/models/llava"))  # renders messages
    return fake_server


def folder_of(tmp_path: Path, *names: str) -> Path:
    folder = tmp_path / "images"
    folder.mkdir()
    for name in names:
        (folder / name).write_bytes(f"image {name}".encode())  # the fake server never decodes them
    (folder / "notes.txt").write_text("not an image")
    return folder


def test_each_request_takes_the_next_image_and_the_same_prompts_go_as_text(served: FakeServer,
                                                                          tmp_path: Path) -> None:
    folder = folder_of(tmp_path, "b.png", "a.jpg")
    result = cli("bench", "--url", served.url, "--model", MODEL, "--images", str(folder), *RUN, "-o",
                 str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert [(t["inputs"], t["server"]) for t in printed["targets"]] == [("images", "Fake llava"),
                                                                       ("text only", "Fake llava")]
    requests = served.requests
    assert len(requests) == 8
    sent = sorted((r.prompts[0], r.params.images) for r in requests)
    with_images_, text = [s for s in sent if s[1]], [s for s in sent if not s[1]]
    assert sorted(p for p, _ in with_images_) == sorted(p for p, _ in text), "the same prompts, as text only"
    assert sorted(i for _, images in with_images_ for i in images) == [b"image a.jpg"] * 2 + [b"image b.png"] * 2
    assert all(r.messages is not None for r in requests), "sent as a chat: the model renders the images' places"
    [row] = printed["images"]
    assert row["level"] == "c=1" and row["ttft_images_ms"] > 0 and row["ttft_text_ms"] > 0
    assert row["ttft_ratio"] == round(row["ttft_images_ms"] / row["ttft_text_ms"], 3)
    assert row["vision_encode_ms"] is None, "the fake server has no metrics page"
    out = tmp_path / "out"
    assert "ttft_ratio" in (out / "bench_images.csv").read_text().splitlines()[0]
    page = (out / "bench.html").read_text()
    assert "Images beside text only" in page and f"from {folder}, one a request in turn" in page


def test_an_input_file_names_each_prompts_own_images(served: FakeServer, tmp_path: Path) -> None:
    folder_of(tmp_path, "cat.png", "dog.png")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps(line) for line in (
        {"text": "What animal?", "images": ["images/cat.png"]},
        {"text": "Which two?", "images": ["images/cat.png", "images/dog.png"]})))
    result = cli("bench", "--url", served.url, "--model", MODEL, "--input-file", str(prompts), *RUN, "-o",
                 str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    assert all(r.messages is not None for r in served.requests)
    sent = {(r.messages[0][-1]["content"], r.params.images) for r in served.requests if r.messages}
    assert sent == {("What animal?", (b"image cat.png",)), ("Which two?", (b"image cat.png", b"image dog.png")),
                    ("What animal?", ()), ("Which two?", ())}


def test_bad_image_inputs_fail_before_anything_is_sent(served: FakeServer, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_one_line_error(cli("bench", "--url", served.url, "--model", MODEL, "--images", str(empty), *RUN),
                          "--images", "no image files")
    missing = tmp_path / "prompts.jsonl"
    missing.write_text(json.dumps({"text": "Look", "images": ["gone.png"]}))
    assert_one_line_error(cli("bench", "--url", served.url, "--model", MODEL, "--input-file", str(missing), *RUN),
                          "prompts.jsonl:1", "gone.png")
    folder = folder_of(tmp_path, "a.png")
    assert_one_line_error(cli("bench", "--url", served.url, "--model", "smollm2_decoupled", "--images", str(folder),
                              *RUN), "--images", "smollm2_decoupled")
    assert_one_line_error(cli("bench", "--url", served.url, "--model", MODEL, "--images", str(folder), "--turns", "2",
                              *RUN), "--turns", "without its images")
    assert not served.requests


def test_without_a_url_the_vision_sample_is_served_for_the_run(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    from console.commands import bench

    served: list[str] = []

    def embedded_server(model: str, progress):  # noqa: ANN001, ANN202
        served.append(model)
        raise ServerError("not started in the fast tier")

    monkeypatch.setattr(bench, "embedded_server", embedded_server)
    assert_one_line_error(cli("bench", "--images", str(folder_of(tmp_path, "a.png")), *RUN), "not started")
    assert served == ["smollm2_vision"]


def test_the_section_puts_each_servers_images_beside_its_text_and_the_encoding_apart() -> None:
    def level(ttft: float, latency: float, tokens: float, encode: float | None = None) -> dict:
        return {"concurrency": 2, "time_to_first_token": {"avg": ttft}, "request_latency": {"avg": latency},
                "input_sequence_length": {"avg": tokens}, "server": {"vision_encode_ms": encode}}

    targets = [{"server": "A", "inputs": "images", "levels": [level(30.0, 90.0, 80.0, 12.0)]},
               {"server": "A", "inputs": "text only", "levels": [level(10.0, 60.0, 16.0)]}]
    assert section(targets) == [{
        "server": "A", "level": "c=2", "ttft_images_ms": 30.0, "vision_encode_ms": 12.0, "ttft_text_ms": 10.0,
        "ttft_ratio": 3.0, "latency_images_ms": 90.0, "latency_text_ms": 60.0, "latency_ratio": 1.5,
        "input_tokens_images": 80.0, "input_tokens_text": 16.0}]


def test_the_ttft_breakdown_shows_the_images_encoding_apart_from_the_network() -> None:
    summary = {"time_to_first_token": {"avg": 50.0}}
    figures = {"ttft_ms": 20.0, "queue_ms": 5.0, "triton_queue_ms": 1.0, "vision_encode_ms": 14.0}
    parts = level_figures(figures, None, 1.0, "", summary)["ttft_breakdown_ms"]
    assert parts == {"queue": 6.0, "vision": 14.0, "prefill": 15.0, "network": 15.0}
    text = level_figures({**figures, "vision_encode_ms": None}, None, 1.0, "", summary)["ttft_breakdown_ms"]
    assert "vision" not in text and text["network"] == 29.0
