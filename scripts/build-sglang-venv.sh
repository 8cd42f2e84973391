#!/usr/bin/env bash
# build-sglang-venv.sh VERSION [DEST]
#
# Build (or reuse) a CPU-only virtualenv in which SGLang's real argument
# parsing and resolution can run: `import sglang.srt.server_args` works,
# nothing that needs a GPU does.  Recipe: docs/sglang-facts.md §6.
#
#   VERSION  an SGLang release on PyPI, e.g. 0.5.11 or 0.5.23
#   DEST     where the venv lives; default
#            ${ORCH_SGLANG_VENV_CACHE:-$HOME/.cache/orch/sglang-venvs}/VERSION
#
# What goes in:
#   1. torch 2.13.0, CPU build (the wheel lies on this machine's disk for
#      Python 3.11; pip must never fall back to a multi-GB CUDA build, so every
#      pip call below runs under a constraint pinning the CPU build),
#   2. triton 3.7.0,
#   3. `pip install --no-deps sglang==VERSION` (its real dependency set pulls
#      CUDA kernels that cannot work here),
#   4. the few dependencies that `sglang.srt.server_args` imports, with the
#      version pins that VERSION's own wheel metadata declares for them (this
#      is how transformers becomes 5.6.0 for 0.5.11 and 5.19.0 for 0.5.23),
#   5. an inert `torchvision` package (scripts/sglang-venv-stubs/torchvision):
#      PyPI's torchvision does not import next to CPU torch,
#   6. whatever else `import sglang.srt.server_args` turns out to need, when
#      sglang itself requires it (an import probe; xgrammar for 0.5.19/0.5.20).
#
# Cached and idempotent: DEST counts as built when it holds the marker file
# .orch-sglang-venv.json (written last) AND `DEST/bin/python -c 'import sglang;
# print(sglang.__version__)'` prints VERSION; then the script exits 0 at once.
# A build happens in a temporary sibling directory that is renamed onto DEST
# only after it passed its checks, so a killed build never leaves a DEST that
# looks valid.  Concurrent runs for the same DEST serialise on DEST.lock.
#
# Environment:
#   ORCH_SGLANG_VENV_CACHE   cache root (see DEST above)
#   ORCH_SGLANG_PYTHON       base interpreter (default: python3.11)
#   ORCH_TORCH_SPEC          torch requirement (default: torch==2.13.0+cpu)
#   ORCH_PIP_ARGS            extra arguments for every pip install (e.g.
#                            "--index-url URL" on a machine without the wheel)
#   ORCH_SGLANG_EXTRA_PKGS   extra requirements installed last (space separated)
#   ORCH_SGLANG_REBUILD=1    rebuild even when DEST looks valid
#   ORCH_SGLANG_KEEP_FAILED=1  keep a failed build's temporary dir (debugging)
#
# Output: progress on stderr; on success DEST (absolute) alone on stdout, so
# `VENV="$(scripts/build-sglang-venv.sh 0.5.11)"` works.  pip's own output
# goes to DEST/.orch-build.log, the installed set to DEST/.orch-freeze.txt.  Never edit this file while a build runs
# (bash reads scripts as it goes).
#
# Exit status: 0 built or already valid, 1 build failed, 2 usage error.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
STUB_DIR="$SCRIPT_DIR/sglang-venv-stubs"
MARKER_NAME=".orch-sglang-venv.json"
RECIPE_REVISION=1 # bump when the recipe changes, so old caches get rebuilt

TORCH_SPEC="${ORCH_TORCH_SPEC:-torch==2.13.0+cpu}"
TRITON_SPEC="triton==3.7.0"
BASE_PYTHON="${ORCH_SGLANG_PYTHON:-python3.11}"

# Imported by sglang.srt.server_args and what it pulls in (docs/sglang-facts.md §6).
# Versions come from the sglang wheel's own Requires-Dist where it pins them.
EXTRA_DEPS=(
    orjson psutil pybase64 requests pillow starlette IPython aiohttp pyzmq dill
    sentencepiece compressed-tensors gguf openai partial_json_parser msgspec
)
# Installed only when the sglang wheel requires them (0.5.11+ all do).
OPTIONAL_DEPS=(apache-tvm-ffi)
# Further requirements are added by the import probe of step 4 (xgrammar for
# 0.5.19/0.5.20), always at the version sglang's metadata pins.

log() { printf '[build-sglang-venv] %s\n' "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}
usage() {
    sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

[[ $# -ge 1 && $# -le 2 ]] || usage
case "$1" in -h | --help) usage ;; esac
VERSION="$1"
[[ "$VERSION" =~ ^[0-9]+(\.[0-9]+)*([a-z0-9.+-]*)$ ]] || {
    log "not a version: '$VERSION'"
    exit 2
}
CACHE_ROOT="${ORCH_SGLANG_VENV_CACHE:-$HOME/.cache/orch/sglang-venvs}"
DEST="${2:-$CACHE_ROOT/$VERSION}"
DEST="${DEST%/}"
[[ -n "$DEST" && "$DEST" != "/" ]] || die "refusing DEST='$DEST'"
mkdir -p "$(dirname "$DEST")"
DEST="$(cd "$(dirname "$DEST")" && pwd)/$(basename "$DEST")"

# is_valid DIR: marker present and sglang in DIR imports as VERSION.
is_valid() {
    local dir="$1" got
    [[ -f "$dir/$MARKER_NAME" && -x "$dir/bin/python" ]] || return 1
    grep -q "\"recipe_revision\": ${RECIPE_REVISION}[,}]" "$dir/$MARKER_NAME" || return 1
    got="$("$dir/bin/python" -c 'import sglang; print(sglang.__version__)' 2>/dev/null)" || return 1
    [[ "$got" == "$VERSION" ]]
}

if [[ "${ORCH_SGLANG_REBUILD:-0}" != 1 ]] && is_valid "$DEST"; then
    log "ok: $DEST already holds sglang $VERSION (cached)"
    printf '%s\n' "$DEST"
    exit 0
fi

# One build per DEST at a time; a second run waits, then finds it cached.
exec 9>"$DEST.lock"
if command -v flock >/dev/null 2>&1; then
    flock 9
fi
if [[ "${ORCH_SGLANG_REBUILD:-0}" != 1 ]] && is_valid "$DEST"; then
    log "ok: $DEST already holds sglang $VERSION (built by a concurrent run)"
    printf '%s\n' "$DEST"
    exit 0
fi
# Holding the lock, any temporary dir of this DEST is a leftover of a build
# that was killed too hard to clean up (SIGKILL, power loss): remove it.
for stale in "$(dirname "$DEST")/.$(basename "$DEST")".{build,old}.*; do
    if [[ -d "$stale" ]]; then
        log "removing leftover $stale"
        rm -rf -- "$stale"
    fi
done

command -v "$BASE_PYTHON" >/dev/null 2>&1 || die "base python '$BASE_PYTHON' not found (set ORCH_SGLANG_PYTHON)"
[[ -f "$STUB_DIR/torchvision/__init__.py" ]] || die "missing $STUB_DIR/torchvision (stub torchvision package)"

TMP="$(mktemp -d "$(dirname "$DEST")/.$(basename "$DEST").build.XXXXXX")"
chmod 755 "$TMP"
PIP_PID=""
cleanup() {
    local rc=$?
    [[ -z "$PIP_PID" ]] || kill "$PIP_PID" 2>/dev/null || true  # a pip still running (stopped)
    if [[ -n "${TMP:-}" && -d "$TMP" ]]; then
        if [[ $rc -ne 0 && "${ORCH_SGLANG_KEEP_FAILED:-0}" == 1 ]]; then
            log "kept the failed build for inspection: $TMP"
        else
            rm -rf -- "$TMP"
        fi
    fi
    if [[ $rc -ne 0 ]]; then
        log "FAILED (exit $rc); $DEST left as it was"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

START_S=$SECONDS
log "building sglang $VERSION venv with $BASE_PYTHON in $TMP (final: $DEST)"
"$BASE_PYTHON" -m venv "$TMP"
PY="$TMP/bin/python"

# Every pip call runs with torch pinned to the CPU build.
CONSTRAINTS="$TMP/.orch-constraints.txt"
printf '%s\n' "$TORCH_SPEC" >"$CONSTRAINTS"
read -r -a PIP_EXTRA <<<"${ORCH_PIP_ARGS:-}"
# pip's output goes to DEST/.orch-build.log (it is noisy: sglang's full
# dependency set is deliberately left unmet); its tail is shown on failure.
BUILD_LOG="$TMP/.orch-build.log"
# pip with its output in the build log and a progress line every HEARTBEAT_S seconds while it
# runs (a torch download takes minutes: `make test` must not sit silent that long).
HEARTBEAT_S="${ORCH_BUILD_HEARTBEAT_S:-20}"
pip_quietly() {
    printf '\n$ pip install %s\n' "$*" >>"$BUILD_LOG"
    "$PY" -m pip install --disable-pip-version-check --no-input \
        -c "$CONSTRAINTS" "${PIP_EXTRA[@]}" "$@" >>"$BUILD_LOG" 2>&1 &
    PIP_PID=$!
    local began=$SECONDS next=$((SECONDS + HEARTBEAT_S)) rc=0
    while kill -0 "$PIP_PID" 2>/dev/null; do
        sleep 1
        if ((SECONDS >= next)) && kill -0 "$PIP_PID" 2>/dev/null; then
            local last
            last="$(grep -v '^WARNING: Location' "$BUILD_LOG" | tail -n 1 | cut -c1-100)"
            log "  ... pip still running ($((SECONDS - began)) s): $last"
            next=$((SECONDS + HEARTBEAT_S))
        fi
    done
    wait "$PIP_PID" || rc=$?
    PIP_PID=""
    return "$rc"
}
pip_install() {
    if ! pip_quietly "$@"; then
        grep -v '^WARNING: Location' "$BUILD_LOG" | tail -n 40 >&2
        die "pip install $* failed (full log above, last 40 lines)"
    fi
}

log "step 1/5: $TORCH_SPEC $TRITON_SPEC"
if ! pip_quietly --only-binary=:all: "$TORCH_SPEC" "$TRITON_SPEC"; then
    [[ -z "${ORCH_TORCH_SPEC:-}" ]] || die "pip install $TORCH_SPEC failed (see $BUILD_LOG)"
    # No local CPU wheel on this machine (the +cpu builds are not on PyPI): take the
    # registry's torch of the same release. On x86_64 that is a CUDA build: about 3 GB to
    # download and 5 GB in the venv, several minutes; it runs on the CPU all the same.
    TORCH_SPEC="${TORCH_SPEC%%+*}"
    log "  no $TORCH_SPEC+cpu wheel here: falling back to the registry's $TORCH_SPEC" \
        "(on x86_64 a CUDA build, ~3 GB to download, several minutes)"
    printf '%s\n' "$TORCH_SPEC" >"$CONSTRAINTS"
    pip_install --only-binary=:all: "$TORCH_SPEC" "$TRITON_SPEC"
fi

log "step 2/5: sglang==$VERSION (--no-deps)"
pip_install --no-deps "sglang==$VERSION"

# requirement_specs [--only-required] NAME...: each NAME with the specifier
# that sglang's own unconditional Requires-Dist gives it (transformers ->
# transformers==5.6.0 for 0.5.11), else the bare NAME.  --only-required drops
# names that sglang does not require at all.
requirement_specs() {
    "$PY" - "$@" <<'PYEOF'
import importlib.metadata as md
import re
import sys

def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()

args = sys.argv[1:]
only_required = bool(args) and args[0] == "--only-required"
names = args[1:] if only_required else args
pins = {}
for line in md.requires("sglang") or []:
    if ";" in line:  # markers: extras and other platforms
        continue
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)$", line)
    if match:
        pins[norm(match.group(1))] = match.group(3).strip()
for name in names:
    if norm(name) in pins:
        print(name + pins[norm(name)])
    elif not only_required:
        print(name)
PYEOF
}

log "step 3/5: dependencies needed by sglang.srt.server_args"
mapfile -t DEP_SPECS < <(requirement_specs transformers "${EXTRA_DEPS[@]}")
mapfile -t OPT_SPECS < <(requirement_specs --only-required "${OPTIONAL_DEPS[@]}")
DEP_SPECS+=("${OPT_SPECS[@]}")
case " ${DEP_SPECS[*]} " in
*" transformers=="*) ;;
*) die "could not read sglang $VERSION's transformers pin from its metadata" ;;
esac
log "  ${DEP_SPECS[*]}"
pip_install --prefer-binary "${DEP_SPECS[@]}"
if [[ -n "${ORCH_SGLANG_EXTRA_PKGS:-}" ]]; then
    read -r -a EXTRA_PKGS <<<"$ORCH_SGLANG_EXTRA_PKGS"
    log "  extra: ${EXTRA_PKGS[*]}"
    pip_install "${EXTRA_PKGS[@]}"
fi

log "step 4/5: inert torchvision stub; import probe"
SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
[[ ! -e "$SITE/torchvision" ]] || die "a real torchvision got installed; it breaks next to CPU torch"
cp -R "$STUB_DIR/torchvision" "$SITE/torchvision"
# Releases differ in what `import sglang.srt.server_args` drags in (0.5.19 and
# 0.5.20 import xgrammar at module level, 0.5.11 and 0.5.23 do not).  Import
# it; while it fails on a missing module that sglang itself requires, install
# that requirement at sglang's pin and retry.  Anything else is an error.
for _round in 1 2 3 4 5 6; do
    MISSING="$("$PY" -W ignore - <<'PYEOF'
import sys
try:
    import sglang.srt.server_args  # noqa: F401
except ModuleNotFoundError as exc:
    print((exc.name or "").split(".")[0] or "?")
    sys.exit(0)
print("")
PYEOF
)" || die "import sglang.srt.server_args failed (traceback above)"
    if [[ -z "$MISSING" || "$MISSING" == "?" ]]; then
        break
    fi
    mapfile -t MISSING_SPEC < <(requirement_specs --only-required "$MISSING")
    [[ ${#MISSING_SPEC[@]} -eq 1 ]] ||
        die "import sglang.srt.server_args needs module '$MISSING', which sglang $VERSION does not list as a requirement; add it to EXTRA_DEPS"
    log "  import needs '$MISSING': installing ${MISSING_SPEC[0]}"
    pip_install --prefer-binary "${MISSING_SPEC[0]}"
done

log "step 5/5: checks"
# Paths baked in by venv/pip (console-script shebangs, activate) name $TMP:
# rewrite them to DEST before the move.
while IFS= read -r -d '' file; do
    if grep -Iq -- "$TMP" "$file" 2>/dev/null; then
        sed -i "s|$TMP|$DEST|g" "$file"
    fi
done < <(find "$TMP/bin" -maxdepth 1 -type f -print0)
CHECK_JSON="$("$PY" -W ignore - "$VERSION" <<'PYEOF'
import importlib.metadata as md
import json
import sys
import time

want = sys.argv[1]
t0 = time.monotonic()
import sglang  # noqa: E402
import torch  # noqa: E402
import sglang.srt.server_args as server_args  # noqa: E402

import_s = time.monotonic() - t0
problems = []
if sglang.__version__ != want:
    problems.append(f"sglang.__version__ is {sglang.__version__!r}, want {want!r}")
if "+cpu" not in torch.__version__ or torch.version.cuda is not None:
    problems.append(f"torch {torch.__version__} is not the CPU build")
if not getattr(sys.modules.get("torchvision"), "ORCH_STUB", True):
    problems.append("torchvision is not the stub")
cuda_dists = sorted(
    d.metadata["Name"] for d in md.distributions()
    if (d.metadata["Name"] or "").lower().startswith(("nvidia-", "cuda-"))
)
if cuda_dists:
    problems.append(f"CUDA packages installed: {cuda_dists}")
if not hasattr(server_args.ServerArgs, "add_cli_args"):
    problems.append("ServerArgs.add_cli_args missing")
if problems:
    print("\n".join(problems), file=sys.stderr)
    sys.exit(1)
print(json.dumps({
    "sglang": sglang.__version__,
    "torch": torch.__version__,
    "transformers": md.version("transformers"),
    "python": sys.version.split()[0],
    "server_args_import_s": round(import_s, 1),
}))
PYEOF
)" || die "the new venv failed its checks"

# What exactly went in (unpinned names float to their newest release).
"$PY" -m pip freeze --disable-pip-version-check >"$TMP/.orch-freeze.txt" 2>/dev/null || true

BUILD_S=$((SECONDS - START_S))
printf '{"recipe_revision": %s, "build_s": %s, "check": %s}\n' \
    "$RECIPE_REVISION" "$BUILD_S" "$CHECK_JSON" >"$TMP/$MARKER_NAME"

# Swap into place: the old DEST (invalid or being rebuilt) moves aside first,
# then one rename(2) publishes the new venv.
if [[ -e "$DEST" || -L "$DEST" ]]; then
    if [[ -d "$DEST" && ! -L "$DEST" ]] && [[ -z "$(ls -A "$DEST")" || -f "$DEST/pyvenv.cfg" || -f "$DEST/$MARKER_NAME" ]]; then
        OLD="$(mktemp -d "$(dirname "$DEST")/.$(basename "$DEST").old.XXXXXX")"
        mv -T "$DEST" "$OLD/venv"
        rm -rf -- "$OLD"
    else
        die "$DEST exists and is not a venv; not replacing it"
    fi
fi
mv -T "$TMP" "$DEST"
TMP=""
SIZE="$(du -sh "$DEST" 2>/dev/null | cut -f1)"
log "ok: sglang $VERSION venv at $DEST ($SIZE, ${BUILD_S}s): $CHECK_JSON"
printf '%s\n' "$DEST"
