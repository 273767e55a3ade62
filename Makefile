# The two quick-start commands: `make run` and `make test` (see README.md).
.PHONY: run test test-fast lint bench

run:
	@scripts/setup.sh
	@.venv/bin/qaic-console

test:
	@scripts/setup.sh --test
	@.venv/bin/ruff check .
	@.venv/bin/python -m pytest -q $(PYTEST_ARGS)

test-fast:
	@scripts/setup.sh --test
	@.venv/bin/ruff check .
	@.venv/bin/python -m pytest -q tests/fast $(PYTEST_ARGS)

lint:
	@.venv/bin/ruff check .

bench:
	@scripts/setup.sh
	@.venv/bin/qaic-console bench report
