#!/usr/bin/env bash
# The GPU session of issue 7, as one script on the H200 (device tool). Start it
# in the background (setsid) in a first call and collect /tmp/abdiff-h200/out
# in a second call made within the machine's 30 s idle window; each step copies
# its state folder when it ends, so an interrupted session still returns it.
# Done on 2026-12-02 (results/h200/): main..pr-v1, main..pr. Still to do, in
# priority order: the A/A pr..pr, kernel-capture overhead, --cuda-graph, the
# H200 baseline, the GPU-marked tests.
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
W=/tmp/abdiff-h200; OUTDIR=$W/out; mkdir -p "$OUTDIR"
abdiff() { python3 -m abdiff.cli "$@"; }
now() { date +%s.%N; }
since() { python3 -c "print(round($(now) - $1, 1))"; }
keep_state() { cp -r "$(ls -td $W/cache/runs/*/ | head -1)" "$OUTDIR/state-$1"; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  python3 -c 'import torch, sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda)'
  git --version; nproc; } | tee "$OUTDIR/machine.txt"
[ -d $W/demo ] || abdiff demo init $W/demo
start=$(now)
abdiff pr..pr --configs mtp --repo $W/demo --cache-dir $W/cache --device cuda --quiet \
  --format markdown --output "$OUTDIR/pr..pr.md" --json "$OUTDIR/pr..pr.json" --seed 7
echo "pr..pr exit $? wall $(since "$start") s" | tee -a "$OUTDIR/walltimes.txt"; keep_state "pr..pr"
(cd $W/demo && git checkout -q pr-v1)
python3 benchmarks/kernel_capture_overhead.py --repo $W/demo --out "$OUTDIR/kernel-capture.txt"
start=$(now)
abdiff main..pr-v1 --configs mtp --repo $W/demo --cache-dir $W/cache --device cuda --cuda-graph \
  --quiet --format markdown --output "$OUTDIR/cuda-graph-main..pr-v1.md" \
  --json "$OUTDIR/cuda-graph-main..pr-v1.json" --rounds 3 --max-rounds 3 --seed 7
echo "cuda-graph main..pr-v1 exit $? wall $(since "$start") s" | tee -a "$OUTDIR/walltimes.txt"
keep_state "cuda-graph"
start=$(now)
abdiff baseline refresh reference-h200 --rev pr --configs mtp --repo $W/demo --cache-dir $W/cache \
  --device cuda --baselines-dir "$OUTDIR/baselines" --quiet
echo "baseline refresh exit $? wall $(since "$start") s" | tee -a "$OUTDIR/walltimes.txt"
python3 -m pytest -q -m gpu tests -p no:cacheprovider 2>&1 | tail -15 | tee "$OUTDIR/gpu-tests.txt"
echo done > "$OUTDIR/DONE"
