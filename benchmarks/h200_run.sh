#!/usr/bin/env bash
# The GPU sessions of issue 7, as one script on the H200 (device tool):
#     bash benchmarks/h200_run.sh STEP...      (no STEP: all, in this order)
# Start it in the background (setsid, from a copy of the repository so that the
# next call's re-sync of the working tree cannot change files under it) and
# collect /tmp/abdiff-h200/out in later calls made within the machine's 30 s
# idle window; each step copies its state folder when it ends, so an
# interrupted session still returns what it measured (cp -a: the breakdown of
# benchmarks/pipeline.py --state reads spawn times from file times).
# Results: results/h200/.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
W=/tmp/abdiff-h200; OUTDIR=$W/out; mkdir -p "$OUTDIR"
STEPS=${*:-"eager eager-aa capture tests eager-baseline graph-v1 graph-aa graph graph-baseline"}
abdiff() { python3 -m abdiff.cli "$@"; }
now() { date +%s.%N; }
since() { python3 -c "print(round($(now) - $1, 1))"; }
keep_state() { cp -a "$(ls -td $W/cache/runs/*/ | head -1)" "$OUTDIR/state-$1"; }
# measure NAME RANGE [OPTIONS]: one abdiff run with markdown and JSON reports and its state folder.
measure() {
  local name=$1 range=$2 start; shift 2; start=$(now)
  abdiff "$range" --configs mtp --repo $W/demo --cache-dir $W/cache --device cuda --quiet \
    --format markdown --output "$OUTDIR/$name.md" --json "$OUTDIR/$name.json" --seed 7 "$@"
  echo "$name exit $? wall $(since "$start") s" | tee -a "$OUTDIR/walltimes.txt"
  keep_state "$name"
}
refresh() {
  local start=$(now)
  abdiff baseline refresh reference-h200 --rev pr --configs mtp --repo $W/demo --cache-dir $W/cache \
    --device cuda --baselines-dir "$OUTDIR/baselines-$1" --quiet "${@:2}"
  echo "baseline refresh $1 exit $? wall $(since "$start") s" | tee -a "$OUTDIR/walltimes.txt"
}
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  python3 -c 'import torch, sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda)'
  git --version; nproc; } | tee "$OUTDIR/machine.txt"
[ -d $W/demo ] || abdiff demo init $W/demo
for step in $STEPS; do
  case $step in
    eager) measure main..pr-v1 main..pr-v1; measure main..pr main..pr ;;
    eager-aa) measure pr..pr pr..pr ;;
    capture)
      [ -d $W/pr-v1 ] || git -C $W/demo worktree add -q --detach $W/pr-v1 pr-v1
      python3 benchmarks/kernel_capture_overhead.py --repo $W/pr-v1 --out "$OUTDIR/kernel-capture.txt" ;;
    tests) python3 -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider 2>&1 | tail -15 \
             | tee "$OUTDIR/gpu-tests.txt" ;;
    eager-baseline) refresh eager ;;
    graph-v1) measure graph-main..pr-v1 main..pr-v1 --cuda-graph ;;
    graph-aa) measure graph-pr..pr pr..pr --cuda-graph ;;
    graph) measure graph-main..pr main..pr --cuda-graph ;;
    graph-baseline)
      refresh graph --cuda-graph
      # an eager run against the graph baseline must be refused (exit 2) before measuring
      abdiff baseline:reference-h200..pr --configs mtp --repo $W/demo --cache-dir $W/cache \
        --device cuda --baselines-dir "$OUTDIR/baselines-graph" --quiet 2>&1 | tail -1 \
        | tee "$OUTDIR/baseline-eager-refused.txt"
      measure baseline-graph..pr baseline:reference-h200..pr --cuda-graph \
        --baselines-dir "$OUTDIR/baselines-graph" ;;
    *) echo "unknown step $step" >&2 ;;
  esac
done
echo done > "$OUTDIR/DONE"
