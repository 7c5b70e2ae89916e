#!/bin/bash
# The preflight (python -m experiments.gpu_check "$@") on a borrowed GPU machine without a package index, from the
# kit `make gpu-kit` builds (tests/tools/gpu_kit.py), copied there as .gpu-kit/run.sh. It installs the kit's wheels
# beside the image's packages, points seal at the embedded tokenizer's stand-in, runs the preflight in
# $WORK (default /tmp/seal-gpu-check) and copies what it wrote into $OUT (the device tool's folder of files that
# come back; default: $WORK/out; see collect). PYTHON picks the interpreter (default python3, the image's).
set -uo pipefail
KIT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTHON=${PYTHON:-python3}
WORK=${WORK:-/tmp/seal-gpu-check}
OUT=${OUT:-$WORK/out}
mkdir -p "$WORK/site" "$WORK/cache" "$OUT"
collect() {
  # what comes back (at most 8 files): the preflight's console and report, nvidia-smi's, and in runs.tar.gz the
  # steps' logs and peaks, sanity.json, the train run's records and both runs' saved log-probs (to recompute their
  # figures even when the preflight was stopped before its report); called again by the device command after a
  # timeout (`bash .gpu-kit/run.sh --collect`)
  cp "$WORK/gpu_check.txt" "$WORK/gc/gpu_check.json" "$OUT/" 2>/dev/null
  (cd "$WORK" && tar -czf "$OUT/runs.tar.gz" --ignore-failed-read gc/logs gc/sanity/sanity.json gc/sanity/logprobs gc/train/run.log \
    gc/train/run_config.json gc/train/metrics.jsonl gc/train/metrics.json gc/train/best.json gc/train/logprobs \
    2>/dev/null)
  nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || true
}
if [ "${1:-}" = "--collect" ]; then collect; exit 0; fi
"$PYTHON" -m pip install -q --upgrade --no-index --no-deps --no-compile --disable-pip-version-check --target "$WORK/site" \
  "$KIT"/wheels/*.whl || { echo "gpu kit: the wheels did not install for $("$PYTHON" -V)"; exit 1; }
cp -r "$KIT/cache/." "$WORK/cache/"
export PYTHONPATH="$WORK/site:$KIT/site" SEAL_CACHE="$WORK/cache" HF_HUB_OFFLINE=1 WANDB_MODE=disabled \
  PYTHONUNBUFFERED=1
cd "$KIT/.."
trap collect EXIT
"$PYTHON" -m experiments.gpu_check --out "$WORK/gc" "$@" 2>&1 | tee "$WORK/gpu_check.txt"
