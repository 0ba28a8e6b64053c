#!/usr/bin/env bash
# Issue 22 on the H200: a second baseline session appended to the first (recorded in an
# earlier device call, results/h200/drift/h200-drift-session1.json), then the baseline
# against a fresh run of the same commit (A/A) and against a planted +3% slowdown of one
# config. Writes everything to $OUT. Usage: bash benchmarks/h200_drift.sh
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
W=$(mktemp -d); B=$OUT/baselines; mkdir -p "$B"
ab() { python3 -m abdiff.cli "$@"; }
ab demo init "$W/demo" >/dev/null 2>&1
python3 benchmarks/plant_slowdown.py --repo "$W/demo" --suite mtp \
  --config GEN-TRTLLM-bs32-q1-kv2049 --percent 3 --device cuda 2>&1 | tee "$OUT/plant.txt"
cp results/h200/drift/h200-drift-session1.json "$B/h200-drift.json"
common=(--configs mtp --repo "$W/demo" --cache-dir "$W/cache" --device cuda --quiet
        --baselines-dir "$B")
s=$(date +%s)
ab baseline refresh h200-drift --rev pr --append "${common[@]}"
echo "refresh --append exit $? wall $(( $(date +%s) - s )) s" | tee "$OUT/drift.txt"
ab baseline show h200-drift --repo "$W/demo" --baselines-dir "$B" >"$OUT/show.txt" 2>&1
for name in pr pr-slow; do
  s=$(date +%s)
  ab "baseline:h200-drift..$name" "${common[@]}" --json "$OUT/baseline..$name.json" \
    --format markdown --output "$OUT/baseline..$name.md"
  echo "baseline:h200-drift..$name exit $? wall $(( $(date +%s) - s )) s" | tee -a "$OUT/drift.txt"
done
head -3 "$OUT/show.txt"
