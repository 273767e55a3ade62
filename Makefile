# The two quick-start commands: `make run` and `make test` (see README.md).
.PHONY: run test test-fast test-peers lint bench docs

# Python writes its bytecode caches (__pycache__, git-ignored) whatever the shell said: the suite starts hundreds of
# Python processes (clients, servers, backend stubs), and without the caches each one compiles the project again.
unexport PYTHONDONTWRITEBYTECODE

# pytest's workers (pytest-xdist): each file runs whole on one worker, so its module fixtures start once
TEST_WORKERS ?= 2
PYTEST = .venv/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile
# mypy's cache outlives a clone, in the console's cache (cache_root): a fresh clone's check hashes what it read before
MYPY = .venv/bin/mypy --cache-dir "$$(.venv/bin/python -c 'from backend_model.models import cache_root; print(cache_root() / "mypy")')"

run:
	@scripts/setup.sh
	@.venv/bin/qaic-console

test:
	@scripts/setup.sh --test
	@.venv/bin/ruff check .
	@.venv/bin/lint-imports --no-cache  # the layers (pyproject.toml [tool.importlinter])
	@$(MYPY)  # the files of pyproject.toml [tool.mypy]: console, repo_gen and backend_model
	@$(PYTEST) --durations=15 $(PYTEST_ARGS)

test-fast:
	@scripts/setup.sh --tools
	@.venv/bin/ruff check .
	@.venv/bin/lint-imports --no-cache
	@$(MYPY)
	@$(PYTEST) tests/fast $(PYTEST_ARGS)

# The peer tier, outside `make test`: real vLLM in its own venv (built once by scripts/setup-vllm.sh), llama.cpp's
# llama-server (built once by scripts/setup-llama-server.sh) and AIPerf (scripts/setup-aiperf.sh).
test-peers:
	@scripts/setup.sh --tools
	@.venv/bin/ruff check .
	@VLLM_VENV="$$(scripts/setup-vllm.sh)" QAIC_LLAMA_SERVER="$$(PYTHON=.venv/bin/python scripts/setup-llama-server.sh)" \
	  QAIC_AIPERF="$$(scripts/setup-aiperf.sh)/bin/aiperf" .venv/bin/python -m pytest -q --peers tests/peers $(PYTEST_ARGS)

lint:
	@.venv/bin/ruff check .

# The CPU peer, llama.cpp's llama-server, is built once first; a failed build leaves its section n/a, not the report.
bench:
	@scripts/setup.sh
	@QAIC_LLAMA_SERVER="$$(PYTHON=.venv/bin/python scripts/setup-llama-server.sh)" .venv/bin/qaic-console bench report

# The documentation site (mkdocs-material, strict: a broken link or anchor fails) into site/.
docs:
	@scripts/setup.sh --tools
	@NO_MKDOCS_2_WARNING=1 .venv/bin/python -m mkdocs build --strict
