#!/usr/bin/env bash
# Does a warm worker start (--prestart on: started ahead; fork: forked from a process that
# imported torch) change how much rounds vary? A/A runs of the demo (`pr..pr --configs
# mtp`, a fixed number of rounds, no extension), alternating the MODES PAIRS times so that
# a drift of the machine hits all alike; prints each run's exit, wall time and
# round-to-round CV (lab/noise.py --summary). Numbers go to docs/performance.md.
#     bash lab/prestart_noise.sh [--device auto|cpu|cuda] [--pairs 2] [--rounds 5]
#                                       [--modes "off on"]
# Output: $OUT/prestart.txt and $OUT/prestart-runs.tar.gz (default OUT=/tmp/abdiff-prestart).
set -uo pipefail
DEVICE=auto PAIRS=2 ROUNDS=5 MODES="off on"
while [ $# -gt 0 ]; do
  case $1 in
    --device) DEVICE=$2 ;; --pairs) PAIRS=$2 ;; --rounds) ROUNDS=$2 ;; --modes) MODES=$2 ;;
    *) echo "prestart_noise.sh: unknown option $1 (see the comment at the top)" >&2; exit 2 ;;
  esac
  shift 2
done
OUT=${OUT:-/tmp/abdiff-prestart}
PY=${PYTHON:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
W=$(mktemp -d /tmp/abdiff-prestart.XXXXXX)
mkdir -p "$OUT"
$PY -m abdiff.cli demo init "$W/demo" >"$W/demo-init.txt" 2>&1 || { cat "$W/demo-init.txt"; exit 3; }
for i in $(seq 1 "$PAIRS"); do
  for mode in $MODES; do
    start=$(date +%s.%N)
    $PY -m abdiff.cli pr..pr --configs mtp --repo "$W/demo" --cache-dir "$W/cache-$mode-$i" \
      --device "$DEVICE" --rounds "$ROUNDS" --max-rounds "$ROUNDS" --prestart "$mode" \
      --seed "$i" --quiet --format json --output "$W/result-$mode-$i.json" \
      2>"$W/stderr-$mode-$i.txt"
    code=$?
    wall=$($PY -c "print(round($(date +%s.%N) - $start, 1))")
    echo "prestart $mode, pair $i: exit $code, wall $wall s," \
      "$($PY lab/noise.py --summary "$W"/cache-"$mode"-"$i"/runs/*/[ab].json)" \
      | tee -a "$OUT/prestart.txt"
  done
done
# the run files and results, for docs/performance.md and the tests' recorded data
(cd "$W" && tar -czf "$OUT/prestart-runs.tar.gz" cache-*/runs/*/[ab].json result-*.json)
