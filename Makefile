# Thin wrappers; every target works from a fresh clone.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup test lint type check demo bench argtables clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check orchestrator

type: $(STAMP)
	$(BIN)/mypy

check: lint type test

demo: $(STAMP)
	$(BIN)/orch validate
	$(BIN)/orch render demo
	$(BIN)/orch render qwen36-mtp-b200

bench: $(STAMP)
	$(BIN)/python -m bench

# Regenerate orchestrator/argtables/ from the real sglang packages (slow: builds CPU venvs, cached).
argtables:
	for v in 0.5.11 0.5.23; do \
	  scripts/build-sglang-venv.sh $$v && \
	  $${ORCH_SGLANG_VENV_CACHE:-$$HOME/.cache/orch/sglang-venvs}/$$v/bin/python scripts/gen_sglang_argtable.py --out orchestrator/argtables/ ; \
	done

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache *.egg-info
