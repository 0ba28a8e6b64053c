#!/usr/bin/env bash
# Drift baselines on the H200: one more session appended to a recorded baseline (earlier device
# calls: h200:drift/h200-drift-session1.json holds two, in git history: lab/README.md), then the baseline against
# a fresh run of the same commit (A/A: nothing may be flagged) and against a planted +3%
# slowdown of one config (lab/plant_slowdown.py; WORK=kv, the default, plants a pure
# latency change: a longer KV cache, the same kernels, no fact changed, so only the latency
# verdict can flag it; WORK=spin adds a spin_kernel). Writes everything to $OUT.
# Usage: [BASELINE=file] [APPEND=1|0] [AA=1|0] [PERCENTS="3"] [WORK=kv|spin] [DEVICE=cuda]
#        bash lab/h200_drift.sh
# (APPEND=0: compare against BASELINE as it is; AA=0: skip the A/A; PERCENTS: one planted
# branch pr-slowN per size.)
set -uo pipefail
BASELINE=${BASELINE:?set BASELINE to a recorded baseline file (lab/README.md: raw runs)}
WORK=${WORK:-kv} DEVICE=${DEVICE:-cuda} CONFIGS=${CONFIGS:-mtp}
APPEND=${APPEND:-1} AA=${AA:-1} PERCENTS=${PERCENTS:-3}
CONFIG=${CONFIG:-GEN-TRTLLM-bs32-q1-kv2049}
OUT=${OUT:-/tmp/abdiff-drift}
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
W=$(mktemp -d); B=$OUT/baselines; mkdir -p "$B"
ab() { python3 -m abdiff.cli "$@"; }
ab demo init "$W/demo" >/dev/null 2>&1
for pct in $PERCENTS; do
  python3 lab/plant_slowdown.py --repo "$W/demo" --suite "$CONFIGS" --config "$CONFIG" \
    --percent "$pct" --device "$DEVICE" --work "$WORK" --branch "pr-slow$pct" 2>&1 \
    | grep -v "^USDT" | tee -a "$OUT/plant.txt"
done
cp "$BASELINE" "$B/h200-drift.json"
common=(--configs "$CONFIGS" --repo "$W/demo" --cache-dir "$W/cache" --device "$DEVICE"
        --quiet --baselines-dir "$B")
if [ "$APPEND" = 1 ]; then
  s=$(date +%s)
  ab baseline refresh h200-drift --rev pr --append "${common[@]}" 2>&1 | tee "$OUT/drift.txt"
  echo "refresh --append exit ${PIPESTATUS[0]} wall $(( $(date +%s) - s )) s" \
    | tee -a "$OUT/drift.txt"
fi
ab baseline show h200-drift --repo "$W/demo" --baselines-dir "$B" >"$OUT/show.txt" 2>&1
names=""; [ "$AA" = 1 ] && names=pr
for pct in $PERCENTS; do names="$names pr-slow$pct"; done
for name in $names; do
  s=$(date +%s)
  ab "baseline:h200-drift..$name" "${common[@]}" --json "$OUT/baseline..$name.json" \
    --format markdown --output "$OUT/baseline..$name.md" 2>&1 | tee -a "$OUT/drift.txt"
  echo "baseline:h200-drift..$name exit ${PIPESTATUS[0]} wall $(( $(date +%s) - s )) s" \
    | tee -a "$OUT/drift.txt"
done
head -20 "$OUT/show.txt"
