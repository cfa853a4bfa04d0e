# Two entry points (see README): `make demo` and `make test`. Each creates .venv if needed.
# For the edit-test loop: `make test-fast` (a few minutes) and `make lint`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo test test-fast lint format test-tpu bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.runtime: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

# The tests also build vidax's oneDNN matmul custom call (the onednn extra; a few seconds of g++).
$(VENV)/.test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test,onednn]'
	touch $@ $(VENV)/.runtime

demo: $(VENV)/.runtime
	$(BIN)/vidax generate --prompt "A red car driving over a bridge at night" --output vidax-demo.mp4

# Test files run in TEST_WORKERS processes (one file per process at a time, so a file's
# module-scoped fixtures are built once); each process peaks at about 5 GB resident.
TEST_WORKERS ?= 2

test: $(VENV)/.test
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=15

# The fast tier: the tests marked `fast` (contracts, configs, command-line and server checks, one
# tiny pipeline per family end to end; tests/test_contracts.py holds every family to one), run
# from the files that mark them so that no other test file is imported.
FAST_FILES = $(shell grep -rlE --include='*.py' 'pytest\.mark\.fast\b' tests)

test-fast: $(VENV)/.test
	$(BIN)/python -m pytest -q -m 'fast and not slow' -n $(TEST_WORKERS) --dist loadfile --durations=10 $(FAST_FILES)

# ruff's lint rules and formatter (pyproject.toml [tool.ruff]); `make format` applies both.
lint: $(VENV)/.test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(VENV)/.test
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The TPU lane (tests/tpu), on a TPU VM: JAX's TPU build over the CPU one, then the lane in one
# process (a TPU is held by one process at a time); its tiny checkpoints are built with torch.
test-tpu: $(VENV)/.test
	$(BIN)/pip install -q "jax[tpu]>=0.10,<0.12"
	$(BIN)/python -m pytest -q -m tpu tests/tpu --durations=15

bench: $(VENV)/.test
	$(BIN)/python benchmarks/wan_step.py

clean:
	rm -rf $(VENV) .pytest_cache
