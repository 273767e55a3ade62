"""``eval --images`` on two fake servers: each prompt goes alone with its image (the n-th image in turn), the answers
are compared as the chat eval compares them (the first divergence shown), the report and a recording keep each
prompt's image as its file and digest, ``eval compare`` sends the recorded images again and refuses one that
changed; twin paths, which take no images yet, are refused before anything is sent. The CPU engine's image answers
(a cpu: path) are checked token for token against the served model's in tests/e2e/test_images_served.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from fake_server import FakeServer, bundled_info, registered, reply, with_images
from helpers import cli

MODEL = "llava"
PROMPTS = ("Describe the image.", "What colours?", "Any pattern?")


@pytest.fixture
def servers(fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> tuple[FakeServer, FakeServer]:
    """(the reference's server, the candidate's), each serving the same vision-language model."""
    other = registered(FakeServer(), monkeypatch)
    for server in (fake_server, other):
        server.serve(replace(with_images(bundled_info(MODEL)), hf_model_name="/models/llava"))
    return fake_server, other


@pytest.fixture
def inputs(tmp_path: Path) -> tuple[Path, Path]:
    """(the prompts file, the folder of images)."""
    folder = tmp_path / "images"
    folder.mkdir()
    for name in ("b.png", "a.png"):
        (folder / name).write_bytes(f"image {name}".encode())  # the fake servers never decode them
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS) + "\n")
    return prompts, folder


def sent(server: FakeServer) -> list[tuple[str, tuple[bytes, ...]]]:
    """Each request's user message and images, in prompt order."""
    assert all(r.messages is not None and len(r.messages) == 1 for r in server.requests), "one chat a request"
    return [(r.messages[0][-1]["content"], r.params.images) for r in server.requests if r.messages]


def test_each_prompt_goes_with_its_image_and_the_first_divergence_is_shown(servers, inputs, tmp_path: Path) -> None:
    reference, candidate = servers
    candidate.enqueue(reply("Once upon"), reply("Once upon a hill"))  # the second prompt diverges at its 4th word
    result = cli("eval", "--reference", f"{MODEL}@{reference.url}", "--candidate", f"{MODEL}@{candidate.url}",
                 "--prompts", str(inputs[0]), "--images", str(inputs[1]), "--max-tokens", "4", "-q",
                 "-o", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    expected = [(PROMPTS[0], (b"image a.png",)), (PROMPTS[1], (b"image b.png",)), (PROMPTS[2], (b"image a.png",))]
    assert sent(reference) == sent(candidate) == expected
    document = json.loads((tmp_path / "out" / "eval.json").read_text())
    assert [[image["file"] for image in prompt] for prompt in document["images"]] == [
        [str(inputs[1].resolve() / name)] for name in ("a.png", "b.png", "a.png")]
    comparisons = document["paths"][f"{MODEL}@{candidate.url}"]["comparisons"]
    assert [c["exact"] for c in comparisons] == [False, False, True]
    assert comparisons[1]["first"] == 3 and comparisons[1]["candidate_next"].strip() == "hill"
    assert "likelihood: not measured on image prompts" in result.stdout


def test_a_recording_sends_its_images_again_and_refuses_one_that_changed(servers, inputs, tmp_path: Path) -> None:
    reference, candidate = servers
    golden = tmp_path / "golden.json"
    recorded = cli("eval", "record", "--path", f"{MODEL}@{reference.url}", "--prompts", str(inputs[0]), "--images",
                   str(inputs[1]), "--max-tokens", "4", "-q", "-o", str(golden))
    assert recorded.exit_code == 0, recorded.output
    compared = cli("eval", "compare", str(golden), "--candidate", f"{MODEL}@{candidate.url}", "-q")
    assert compared.exit_code == 0, compared.output
    assert sent(candidate) == sent(reference) and f"pass {MODEL}@{candidate.url}: exact 3/3" in compared.stdout
    (inputs[1] / "a.png").write_bytes(b"another image")
    changed = cli("eval", "compare", str(golden), "--candidate", f"{MODEL}@{candidate.url}", "-q")
    assert changed.exit_code == 2, changed.output  # bad input, as every eval error
    assert changed.stderr.strip() == (f"error: image {inputs[1].resolve() / 'a.png'} changed since it was recorded "
                                      "(its sha256 differs): the recording asked another image")


def test_twin_paths_are_refused_before_anything_is_sent(servers, inputs) -> None:
    reference, _ = servers
    result = cli("eval", "--reference", f"{MODEL}@{reference.url}", "--candidate", "twin", "--images",
                 str(inputs[1]), "-q")
    assert result.exit_code == 2 and "twin paths take no images yet" in result.stderr, result.output
    assert not reference.requests

