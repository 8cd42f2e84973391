# Thin wrappers; every target works from a fresh clone.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed


.PHONY: setup test test-fast lint type check demo bench calibrate argtables sglang-release-check skypilot-venv smg-venv sglang-router-venv clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@# orch's SGLang stand-in (standin/sglang, NOT SGLang) importable as `sglang` in this dev
	@# venv only, so that `make demo` runs on machines without GPUs.
	echo "$(CURDIR)/standin" > "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/orch-sglang-standin.pth"
	touch $(STAMP)

setup: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q

# The unit tier: pure stages, the CLI and commands/ in-process (against a fake agent fed from the
# agent's recorded answers), the supervisor's logic on an injected clock. No server, no agent, no
# shell per example (the property tier); at most 20 s on 2 cores. `make test` runs every tier.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m unit -n 2

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

type: $(STAMP)
	$(BIN)/mypy

check: lint type test

# The demo's profile names orch's SGLang stand-in and its model directory with {from_orch: ...}:
# nothing to prepare, here or from an installed orch (`orch init DIR` writes the same profile).
demo: $(STAMP)
	$(BIN)/orch validate
	$(BIN)/orch render demo
	@# The same launch already running is followed, not restarted. A different demo (another
	@# checkout's, someone else's) is never stopped: orch refuses and says how to stop it.
	$(BIN)/orch up demo
	$(BIN)/orch status demo
	@echo
	@echo "The demo server (orch's SGLang stand-in) runs under orch's agent on this machine."
	@echo "orch is $(BIN)/orch (source $(BIN)/activate to put it on your PATH):"
	@echo "  $(BIN)/orch logs demo        # its log"
	@echo "  $(BIN)/orch down demo        # stop it"

bench: $(STAMP)
	$(BIN)/python -m bench

# orch's memory plan against real SGLang (--load-format dummy) on this box's GPUs: each profile
# this box can host planned, started, read and stopped; predicted vs measured per term into
# bench/results.md's calibration section and bench/calibration.json. Where there is no GPU, one
# line says why and it exits 0 (scripts/calibrate-memory --require-gpu: 3).
#   make calibrate SGLANG_PYTHON=/opt/venvs/sglang/bin/python MODEL=/models/Qwen3.6-27B
calibrate: $(STAMP)
	$(BIN)/python scripts/calibrate-memory $(if $(SGLANG_PYTHON),--python $(SGLANG_PYTHON)) $(if $(MODEL),--model $(MODEL)) $(CALIBRATE_ARGS)

# The optional tier that reads `orch export skypilot` tasks with SkyPilot's own parser (460 MB).
SKYPILOT_VENV ?= $(HOME)/.cache/orch/skypilot-venv
skypilot-venv:
	rm -rf $(SKYPILOT_VENV).partial
	$(PYTHON) -m venv $(SKYPILOT_VENV).partial
	$(SKYPILOT_VENV).partial/bin/python -m pip install --quiet 'skypilot==0.14.1'
	$(SKYPILOT_VENV).partial/bin/python -c 'import sky'
	rm -rf $(SKYPILOT_VENV) && mv $(SKYPILOT_VENV).partial $(SKYPILOT_VENV)

# The optional tier that runs a real SGLang Model Gateway (`smg`, a Rust binary in a 37 MB wheel)
# in front of orch's stand-in (tests/gateway): built once per machine and cached.
SMG_VENV ?= $(HOME)/.cache/orch/smg-venv
SMG_VERSION ?= 1.13.0
# Built where it stays (a venv's console scripts name their interpreter's path, so a renamed venv
# cannot run `smg`); the stamp, written last, says the build completed: the tier wants it.
smg-venv:
	rm -rf $(SMG_VENV)
	$(PYTHON) -m venv $(SMG_VENV)
	$(SMG_VENV)/bin/python -m pip install --quiet 'smg==$(SMG_VERSION)'
	$(SMG_VENV)/bin/smg launch --help >/dev/null
	$(SMG_VENV)/bin/python -c 'import importlib.metadata as m; print(m.version("smg"))' > $(SMG_VENV)/.orch-smg-venv

# The last sglang-router with only the older worker names (/add_worker, /remove_worker,
# /list_workers; 0.2 and later serve smg's /workers): the gateway tier's legacy-dialect test.
SGLANG_ROUTER_VENV ?= $(HOME)/.cache/orch/sglang-router-venv
sglang-router-venv:
	rm -rf $(SGLANG_ROUTER_VENV)
	$(PYTHON) -m venv $(SGLANG_ROUTER_VENV)
	$(SGLANG_ROUTER_VENV)/bin/python -m pip install --quiet 'sglang-router==0.1.9'
	$(SGLANG_ROUTER_VENV)/bin/python -m sglang_router.launch_router --help >/dev/null
	$(SGLANG_ROUTER_VENV)/bin/python -c 'import importlib.metadata as m; print(m.version("sglang-router"))' > $(SGLANG_ROUTER_VENV)/.orch-sglang-router-venv

# SGLang's argument tables, built from each release's real package (scripts/argtables.py: one
# cached CPU venv of 0.5.23 plus a small overlay per release, ~1 min each the first time), then
# docs/sglang-versions.md rewritten; fails when argtable.RENAMES misses a rename.
#   make argtables VERSIONS="0.5.17 0.5.24"     # these releases
#   make argtables                              # every release orch covers on the registry
argtables:
	$(PYTHON) scripts/argtables.py build $(VERSIONS)
	$(PYTHON) scripts/argtables.py report

# When SGLang publishes a release: build the tables the registry has and orch lacks, report what
# changed (docs/sglang-versions.md), fail on a rename orch's map misses.
sglang-release-check:
	$(PYTHON) scripts/argtables.py release-check

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache *.egg-info
