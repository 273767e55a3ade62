"""The suite's warning policy (``filterwarnings`` in pyproject.toml): a warning from the project's code fails."""

from __future__ import annotations

import warnings

import pytest


@pytest.mark.parametrize("module", ["console", "console.web.app", "backend_model.engine.loop", "repo_gen.command"])
def test_a_warning_raised_from_the_projects_code_fails_the_test(module: str) -> None:
    with pytest.raises(DeprecationWarning, match="an old call"):
        warnings.warn_explicit("an old call", DeprecationWarning, f"{module.replace('.', '/')}.py", 1, module=module)
