"""Fixtures the fast tier's twin tests share: QEfficient's own tiny-Llama exports and their tokenizer."""

from __future__ import annotations

import pytest
from twin_data import QeffFixtures, qeff_fixtures

from backend_model.models import load_tokenizer


@pytest.fixture(scope="session")
def qeff() -> QeffFixtures:
    return qeff_fixtures()


@pytest.fixture(scope="session")
def qeff_tokenizer(qeff):
    return load_tokenizer(str(qeff.hf), progress=lambda message: None)[0]
