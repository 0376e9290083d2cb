#!/usr/bin/env bash
# Create or update the CPU-only sglang venv used by scripts/gen_sglang_flags.py and the
# conformance test tier.
#
#   bash scripts/sglang-cpu/setup.sh [VENV_DIR]      # default: <repo>/.venv-sglang
#
# * Installs exactly scripts/sglang-cpu/requirements.txt with `pip install --no-deps`
#   (the file is the complete, pinned closure; nothing is resolved, so no CUDA wheel
#   can sneak in), removes any distribution not listed there, and copies the import
#   stubs from scripts/sglang-cpu/stubs/ into site-packages.
# * Verifies: `import sglang.srt.server_args`, building the parser with
#   ServerArgs.add_cli_args, importing the EAGLE-3 target model modules, and that no
#   nvidia-*/cuda-* distribution and no CUDA torch is installed.
# * Writes VENV_DIR/.specctl-sglang-cpu.stamp with the sha256 of its inputs (this script,
#   requirements.txt, the stubs, the base interpreter's version).  A later run with the
#   same inputs only compares that hash and exits (well under a second).
#
# Environment:
#   SGLANG_CPU_PYTHON   base interpreter (default /root/.pyenv/shims/python3, else python3.11)
#   SGLANG_CPU_FORCE=1  ignore the stamp and re-sync/verify
#   PIP_* variables are honoured by pip as usual (e.g. PIP_FIND_LINKS for the torch CPU wheel).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
VENV="${1:-$REPO/.venv-sglang}"
case "$VENV" in /*) ;; *) VENV="$PWD/$VENV" ;; esac
REQS="$HERE/requirements.txt"
STUBS="$HERE/stubs"
STAMP="$VENV/.specctl-sglang-cpu.stamp"

log() { printf 'sglang-cpu: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---- base interpreter -----------------------------------------------------------------
if [[ -n "${SGLANG_CPU_PYTHON:-}" ]]; then
  BASE_PY="$SGLANG_CPU_PYTHON"
elif [[ -x /root/.pyenv/shims/python3 ]]; then
  BASE_PY=/root/.pyenv/shims/python3
else
  BASE_PY="$(command -v python3.11 || true)"
fi
[[ -n "$BASE_PY" ]] || die "no Python 3.11 found; set SGLANG_CPU_PYTHON"

# ---- fast path: unchanged inputs -> nothing to do -------------------------------------
inputs_hash() {
  {
    printf 'setup.sh %s\n' "$(sha256sum < "${BASH_SOURCE[0]}" | cut -d' ' -f1)"
    printf 'requirements.txt %s\n' "$(sha256sum < "$REQS" | cut -d' ' -f1)"
    (cd "$STUBS" && find . -type f -name '*.py' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
    printf 'base-python %s\n' "$BASE_PY"
  } | sha256sum | cut -d' ' -f1
}
WANT="$(inputs_hash)"
if [[ "${SGLANG_CPU_FORCE:-0}" != 1 && -f "$STAMP" && -x "$VENV/bin/python" ]] \
   && [[ "$(cat "$STAMP")" == "$WANT" ]]; then
  log "$VENV is up to date"
  exit 0
fi

T0=$SECONDS
"$BASE_PY" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' \
  || die "$BASE_PY is not Python 3.11"

mkdir -p "$VENV"
# One setup at a time per venv (e.g. `make -j`).
if command -v flock >/dev/null 2>&1; then
  exec 9>"$VENV/.setup.lock"
  flock 9
fi
rm -f "$STAMP"

if [[ ! -x "$VENV/bin/python" ]]; then
  log "creating $VENV with $BASE_PY"
  "$BASE_PY" -m venv "$VENV"
fi
PY="$VENV/bin/python"
"$PY" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' \
  || die "$VENV is not a Python 3.11 venv; remove it and re-run"

export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
PIP_ARGS=(--no-deps --only-binary=:all: -r "$REQS")
# The torch CPU build (torch==2.13.0+cpu) is not on PyPI; on these machines it lies in
# /opt/wheels (already a find-links entry of the global pip config; repeated here so the
# script also works with PIP_CONFIG_FILE=/dev/null).
if [[ -d /opt/wheels ]]; then PIP_ARGS+=(--find-links /opt/wheels); fi

log "installing $(grep -cE '^[A-Za-z0-9]' "$REQS") pinned distributions (--no-deps)"
# (grep drops the global pip config's notes about absent local index folders)
if ! "$PY" -m pip install -q "${PIP_ARGS[@]}" 2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2); then
  die "pip install failed. torch==2.13.0+cpu must be reachable: it is in /opt/wheels on the
  project machines; elsewhere use PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu"
fi

# ---- remove distributions that are not in requirements.txt ----------------------------
EXTRA="$("$PY" -I - "$REQS" <<'EOF'
import re, sys
from importlib.metadata import distributions
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
want = {"pip", "setuptools", "wheel"}
for line in open(sys.argv[1], encoding="utf-8"):
    line = line.split("#", 1)[0].strip()
    if line and not line.startswith("-"):
        want.add(norm(re.split(r"[=<>!~\[; ]", line, maxsplit=1)[0]))
have = {norm(d.metadata["Name"]) for d in distributions() if d.metadata["Name"]}
print(" ".join(sorted(have - want)))
EOF
)"
if [[ -n "$EXTRA" ]]; then
  log "removing distributions not in requirements.txt: $EXTRA"
  # shellcheck disable=SC2086
  "$PY" -m pip uninstall -q -y $EXTRA
fi

# ---- stubs ------------------------------------------------------------------------------
SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
for stub in "$STUBS"/*; do
  name="$(basename "$stub")"
  [[ "$name" == __pycache__ ]] && continue
  rm -rf "${SITE:?}/$name"
  cp -R "$stub" "$SITE/$name"
  find "$SITE/$name" -name __pycache__ -type d -prune -exec rm -rf {} +
done

# ---- verify -----------------------------------------------------------------------------
log "verifying imports"
"$PY" -I - <<'EOF'
import argparse, importlib, re, sys, time
from importlib.metadata import distributions

bad = sorted(
    d.metadata["Name"] for d in distributions()
    if re.match(r"(nvidia|cuda)[-_]", d.metadata["Name"] or "", re.I)
)
assert not bad, f"CUDA distributions installed: {bad}"

t = time.perf_counter()
import torch
assert torch.version.cuda is None, f"torch is a CUDA build ({torch.__version__})"
from sglang.srt.server_args import ServerArgs
t_sa = time.perf_counter() - t
parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
ns = parser.parse_args(["--model-path", "x", "--speculative-algorithm", "EAGLE3"])
assert ServerArgs.from_cli_args(ns).speculative_algorithm == "EAGLE3"

models = ["llama", "qwen2", "qwen3", "qwen3_moe", "deepseek_v2", "gpt_oss", "kimi_k25"]
for name in models:
    mod = importlib.import_module(f"sglang.srt.models.{name}")
    classes = [c for c in vars(mod).values()
               if isinstance(c, type) and c.__module__ == mod.__name__
               and hasattr(c, "set_eagle3_layers_to_capture")]
    assert classes, f"sglang.srt.models.{name}: no class with set_eagle3_layers_to_capture"
import sglang
print(f"sglang-cpu: verified sglang {sglang.__version__}, torch {torch.__version__}, "
      f"{len(parser._actions) - 1} CLI arguments, server_args import {t_sa:.1f}s, "
      f"{len(models)} model modules", file=sys.stderr)
EOF

printf '%s\n' "$WANT" > "$STAMP.tmp"
mv "$STAMP.tmp" "$STAMP"
log "done in $((SECONDS - T0))s: $VENV"
