"""``/v1/models`` on a fake upstream. (Served: e2e/test_front.py, test_front_routes.py.)"""

from __future__ import annotations

from fake_server import bundled_info, plain_info
from fake_upstream import FakeUpstream, call, error


def test_the_models_are_listed_as_cards_owned_by_this_front() -> None:
    body = call(FakeUpstream(bundled_info("a"), plain_info("b")), "GET", "/v1/models").json()
    assert body["object"] == "list" and [(m["id"], m["owned_by"]) for m in body["data"]] == [
        ("a", "qaic-console"), ("b", "qaic-console")]


def test_a_card_names_the_controls_its_model_takes() -> None:
    cards = call(FakeUpstream(bundled_info("a"), plain_info("b")), "GET", "/v1/models").json()["data"]
    assert {"max_tokens", "temperature"} <= set(cards[0]["controls"]) and cards[1]["controls"] == []


def test_a_card_has_the_context_length_the_upstream_knows() -> None:
    card = call(FakeUpstream(lengths={"smollm2": 512}), "GET", "/v1/models/smollm2").json()
    assert card["id"] == "smollm2" and card["max_model_len"] == 512


def test_an_unknown_model_is_a_404_model_not_found() -> None:
    assert error(call(FakeUpstream(), "GET", "/v1/models/nope")) == (404, "model", "model_not_found")

