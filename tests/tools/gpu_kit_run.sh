#!/bin/bash
# The preflight (python -m experiments.gpu_check "$@") on a borrowed GPU machine without a package index, from the
# kit `make gpu-kit` builds (tests/tools/gpu_kit.py), copied there as .gpu-kit/run.sh. It installs the kit's wheels
# beside the image's packages, points seal at the embedded tokenizer's stand-in, runs the preflight in
# $WORK (default /tmp/seal-gpu-check) and copies its report and step logs into $OUT (the device tool's folder of
# files that come back; default: $WORK/out). PYTHON picks the interpreter (default python3, the image's).
set -uo pipefail
KIT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTHON=${PYTHON:-python3}
WORK=${WORK:-/tmp/seal-gpu-check}
OUT=${OUT:-$WORK/out}
mkdir -p "$WORK/site" "$WORK/cache" "$OUT"
"$PYTHON" -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check --target "$WORK/site" \
  "$KIT"/wheels/*.whl || { echo "gpu kit: the wheels did not install for $("$PYTHON" -V)"; exit 1; }
cp -r "$KIT/cache/." "$WORK/cache/"
export PYTHONPATH="$WORK/site:$KIT/site" SEAL_CACHE="$WORK/cache" HF_HUB_OFFLINE=1 WANDB_MODE=disabled \
  PYTHONUNBUFFERED=1
cd "$KIT/.."
collect() {
  # what comes back (at most 8 files): the preflight's console, its report and the two runs' logs and peaks
  cp "$WORK/gpu_check.txt" "$OUT/" 2>/dev/null
  for f in "$WORK"/gc/*.json "$WORK"/gc/*.md "$WORK"/gc/logs/*; do [ -f "$f" ] && cp "$f" "$OUT/"; done
}
trap collect EXIT
"$PYTHON" -m experiments.gpu_check --out "$WORK/gc" "$@" 2>&1 | tee "$WORK/gpu_check.txt"
