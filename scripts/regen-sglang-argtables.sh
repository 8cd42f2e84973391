#!/usr/bin/env bash
# regen-sglang-argtables.sh [VERSION...]
#
# Rebuild orchestrator/argtables/sglang-<VERSION>.json from the real sglang
# packages: for each VERSION, build (or reuse) its CPU-only venv with
# scripts/build-sglang-venv.sh, then run scripts/gen_sglang_argtable.py with
# that venv's python.  With no VERSION, regenerates every table already in
# orchestrator/argtables/.  The venvs are cached (see build-sglang-venv.sh:
# ORCH_SGLANG_VENV_CACHE), so a rerun only pays ~10 s per version.
#
# The output is deterministic; `git diff orchestrator/argtables/` after a
# rerun shows only what SGLang (or this tooling) changed.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$REPO/orchestrator/argtables"
CACHE_ROOT="${ORCH_SGLANG_VENV_CACHE:-$HOME/.cache/orch/sglang-venvs}"

versions=("$@")
if [[ ${#versions[@]} -eq 0 ]]; then
    shopt -s nullglob
    for table in "$OUT"/sglang-*.json; do
        name="$(basename "$table" .json)"
        versions+=("${name#sglang-}")
    done
    shopt -u nullglob
fi
if [[ ${#versions[@]} -eq 0 ]]; then
    echo "usage: $0 VERSION... (no tables in $OUT to regenerate)" >&2
    exit 2
fi

for version in "${versions[@]}"; do
    "$REPO/scripts/build-sglang-venv.sh" "$version" "$CACHE_ROOT/$version" >/dev/null
    "$CACHE_ROOT/$version/bin/python" -W ignore "$REPO/scripts/gen_sglang_argtable.py" \
        --out "$OUT" --strict
done
