#!/usr/bin/env bash
# A plan of 5 rounds per side that borrows each config's noise from an earlier run, on a
# GPU, from the repository root (about 3 minutes on an H100):
#     [DEVICE=cuda] [PERCENT=3] bash lab/few_rounds_gpu.sh
# Steps: build the demo; plant PERCENT% more work in GEN-TRTLLM-bs32-q1-kv2049 on branch
# pr-slow (lab/plant_slowdown.py); the earlier run `main..main` at 11 rounds per side (10 df,
# every round timed at the suite's count: no plan of iterations); then `pr..pr-slow` twice
# and the A/A `pr..pr` once, each `--rounds 5 --max-rounds 5`. main is on pr's first-parent
# line, so those runs borrow from it. Prints, per run: exit, wall, the flagged configs,
# and whether the planted config's look borrowed (its method). Results under $OUT (or
# /tmp/abdiff-few/out): one line per run in few-rounds.txt.
set -uo pipefail
DEVICE=${DEVICE:-cuda} PERCENT=${PERCENT:-3} CONFIG=GEN-TRTLLM-bs32-q1-kv2049
OUT=${OUT:-/tmp/abdiff-few/out}
PY=${PYTHON:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
W=$(mktemp -d /tmp/abdiff-few.XXXXXX)
mkdir -p "$OUT"
$PY -m abdiff.cli demo init "$W/demo" >/dev/null 2>&1 || { echo "demo init failed" >&2; exit 3; }
$PY lab/plant_slowdown.py --repo "$W/demo" --suite mtp --config "$CONFIG" --percent "$PERCENT" \
  --device "$DEVICE" >"$OUT/plant.txt" 2>&1 || { cat "$OUT/plant.txt" >&2; exit 3; }
run() {  # NAME RANGE ROUNDS SEED
  local start; start=$(date +%s.%N)
  $PY -m abdiff.cli "$2" --configs mtp --repo "$W/demo" --cache-dir "$W/cache" --device "$DEVICE" \
    --rounds "$3" --max-rounds "$3" --seed "$4" --json "$OUT/$1.json" >"$OUT/$1.txt" 2>&1
  local code=$?
  $PY - "$OUT/$1.json" "$1" "$code" "$($PY -c "print(round($(date +%s.%N) - $start, 1))")" \
    "$CONFIG" <<'PYEOF' | tee -a "$OUT/few-rounds.txt"
import json, sys
path, name, code, wall, planted = sys.argv[1:]
result = json.load(open(path))
flagged = [f"{c['id']} {c['latency']['verdict']} {c['latency']['ratio']:.4f}"
           for c in result["configs"] if c["latency"]["verdict"] in ("slower", "faster")]
method = next(c["latency"]["method"] for c in result["configs"] if c["id"] == planted)
print(f"{name}: exit {code}, wall {wall} s, flagged {flagged or 'none'}; "
      f"borrowed: {'variances borrowed' in method}")
PYEOF
}
run earlier-main..main main..main 11 1
run slow-1 pr..pr-slow 5 2
run slow-2 pr..pr-slow 5 3
run aa pr..pr 5 4
