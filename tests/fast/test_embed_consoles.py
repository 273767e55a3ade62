"""The consoles' embeddings mode: headless ``--embed`` and the TUI's Embeddings pane on the fake server (vectors:
:func:`fake_server.fake_vector`), and the OpenAI adapter's vectors from the front served over loopback on a fake
upstream."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from fake_server import FakeServer, embedding_info, fake_vector
from fake_upstream import FakeUpstream
from helpers import assert_one_line_error, cli
from textual.widgets import DataTable, Input, Select
from tui_pilot import SIZE, run, table_rows, until

from console.core.adapters import adapter_for
from console.core.embeddings import embed
from console.front.http_server import FrontServer
from console.front.state import Front
from console.server import free_port
from console.tui.app import QaicConsoleApp

TEXTS = ["a cat sat", "a cat sits", "zzz"]


def cosine(a: str, b: str) -> float:
    u, v = np.array(fake_vector(a)), np.array(fake_vector(b))
    return float(u @ v / np.linalg.norm(u) / np.linalg.norm(v))


def test_embed_prints_each_inputs_dimension_and_norm_and_the_similarity_table(fake_server: FakeServer) -> None:
    fake_server.serve(embedding_info("minilm"))
    result = cli("--embed", "|".join(TEXTS), "--url", fake_server.url)
    assert result.exit_code == 0, result.output
    assert fake_server.embedded == [("minilm", TEXTS)]  # the server's first embedding model, by default
    lines = result.stdout.splitlines()
    rows = [line.split() for line in lines[1:4]]
    assert [row[-3:] for row in rows] == [["8", "1.0000", "3"], ["8", "1.0000", "3"], ["8", "1.0000", "1"]]
    matrix = [line.split()[-3:] for line in lines[-3:]]
    assert [float(v) for v in matrix[0]] == pytest.approx([1.0, cosine(TEXTS[0], TEXTS[1]), cosine(TEXTS[0], "zzz")],
                                                          abs=1e-4)
    assert matrix[1][1] == matrix[2][2] == "1.0000" and "3 vectors from minilm" in result.stderr


def test_embed_json_has_the_inputs_and_the_matrix(fake_server: FakeServer) -> None:
    fake_server.serve(embedding_info("minilm"), embedding_info("other"))
    result = cli("--embed", "x y|y x", "--url", fake_server.url, "--model", "other", "--json")
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["model"] == "other" and [(i["text"], i["dimension"], i["tokens"]) for i in body["inputs"]] == [
        ("x y", 8, 2), ("y x", 8, 2)]
    assert body["similarity"] == [[1.0, 1.0], [1.0, 1.0]]


def test_embed_failures_are_one_error_line(fake_server: FakeServer) -> None:
    url = fake_server.url
    assert_one_line_error(cli("--embed", "a|b", "--url", url), "serves no embedding model", "--model")
    assert_one_line_error(cli("--embed", "a", "--url", url, "--model", "smollm2_kv"), "not an embedding model")
    fake_server.serve(embedding_info("minilm"))
    assert_one_line_error(cli("--embed", "a||b", "--url", url), "prompt 2 of 3 is empty")
    fake_server.reachable = False
    assert_one_line_error(cli("--embed", "a", "--url", url), "does not answer")
    result = cli("--embed", "a")
    assert result.exit_code == 2 and "--embed needs --url" in result.stderr


def test_the_tui_embeddings_pane_shows_the_inputs_and_the_matrix(fake_server: FakeServer) -> None:
    fake_server.serve(embedding_info("minilm"))

    async def go() -> None:
        app = QaicConsoleApp(http_url=fake_server.url)
        async with app.run_test(size=SIZE) as pilot:
            pane = app.embed_pane
            await until(pilot, lambda: pane.server is not None, 30, "the connection")
            await pilot.press("f10")
            assert app.active == "embed" and pane.query_one("#embed-input", Input).has_focus
            assert [str(o[0]) for o in pane.query_one("#embed-model", Select)._options[1:]] == ["minilm"]
            pane.query_one("#embed-input", Input).value = "|".join(TEXTS)
            await pilot.press("enter")
            await until(pilot, lambda: pane.found is not None, 30, "the vectors")
            inputs = table_rows(pane.query_one("#embed-inputs", DataTable))
            assert [row[1:] for row in inputs.values()] == [("8", "1.0000", "3"), ("8", "1.0000", "3"),
                                                            ("8", "1.0000", "1")]
            matrix = list(table_rows(pane.query_one("#embed-matrix", DataTable)).values())
            assert matrix[0][1:] == ("1.0000", f"{cosine(TEXTS[0], TEXTS[1]):.4f}", f"{cosine(TEXTS[0], 'zzz'):.4f}")
            assert fake_server.embedded == [("minilm", TEXTS)]
            pane.query_one("#embed-input", Input).value = "a||b"
            await pilot.press("enter")
            assert "prompt 2 of 3 is empty" in str(pane.query_one("#embed-status").content)

    run(go)


def test_the_openai_adapter_asks_an_openai_server_for_vectors() -> None:
    upstream = FakeUpstream(embedding_info("minilm"))
    front = FrontServer(Front(upstream), "127.0.0.1", free_port())
    front.start()
    try:
        found = embed(adapter_for(front.base_url), None, TEXTS)
    finally:
        front.stop()
    assert upstream.embedded == [TEXTS] and found.model == "minilm" and found.tokens is None
    assert found.similarity[0, 1] == pytest.approx(cosine(TEXTS[0], TEXTS[1]), abs=1e-6)
    assert found.norms == pytest.approx([1.0] * 3)


def test_the_web_embeddings_tab_answers_with_the_rows_and_a_heat_map(fake_server: FakeServer, tmp_path: Path) -> None:
    import gradio as gr

    from console.core.controller import ServerController
    from console.web.handlers import WebConsole

    fake_server.serve(embedding_info("minilm"))
    controller = ServerController()
    controller.connect(fake_server.url)
    try:
        console = WebConsole(controller, tmp_path)
        status, rows, heat = console.embed("|".join(TEXTS), "")
        assert "3 vectors from minilm" in status and fake_server.embedded == [("minilm", TEXTS)]
        assert rows.values.tolist() == [["1 a cat sat", 8, 1.0, 3], ["2 a cat sits", 8, 1.0, 3], ["3 zzz", 8, 1.0, 1]]
        assert heat.count("<tr>") == 4 and f">{cosine(TEXTS[0], TEXTS[1]):.4f}</td>" in heat
        _, _, heat = console.embed("<b>bold</b>|x", "minilm")
        assert "<b>" not in heat and "&lt;b&gt;" in heat  # a text shows as text
        status, rows, heat = console.embed("a", "smollm2_kv")
        assert "not an embedding model" in status and rows == heat == gr.skip()  # the last answer stays
    finally:
        controller.stop()
