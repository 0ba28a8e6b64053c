#!/usr/bin/env bash
# The GPU session of issue 7, as one script on the H200 (device tool), in priority order:
# main..pr-v1, main..pr and an A/A pr..pr of the mtp suite on CUDA with default
# settings; a baseline refresh; the kernel-capture overhead; a --cuda-graph run;
# the GPU-marked tests. Results accumulate in /tmp/abdiff-h200/out (reports,
# result JSON, run files, worker logs) and are unpacked into results/h200/.
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
W=/tmp/abdiff-h200; OUTDIR=$W/out; mkdir -p "$OUTDIR"
abdiff() { python3 -m abdiff.cli "$@"; }
now() { date +%s.%N; }
since() { python3 -c "print(round($(now) - $1, 1))"; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  python3 -c 'import torch, sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda)'
  git --version; nproc; } | tee "$OUTDIR/machine.txt"
[ -d $W/demo ] || abdiff demo init $W/demo
for r in main..pr-v1 main..pr pr..pr; do
  start=$(now)
  abdiff "$r" --configs mtp --repo $W/demo --cache-dir $W/cache --device cuda --quiet \
    --format markdown --output "$OUTDIR/$r.md" --json "$OUTDIR/$r.json" --seed 7
  code=$?
  echo "$r exit $code wall $(since "$start") s" | tee -a "$OUTDIR/walltimes.txt"
  cp -r "$(ls -td $W/cache/runs/*/ | head -1)" "$OUTDIR/state-$r"
done
start=$(now)
abdiff baseline refresh reference-h200 --rev pr --configs mtp --repo $W/demo --cache-dir $W/cache \
  --device cuda --baselines-dir "$OUTDIR/baselines" --quiet
echo "baseline refresh exit $? wall $(since "$start") s" | tee -a "$OUTDIR/walltimes.txt"
(cd $W/demo && git checkout -q pr-v1)
python3 benchmarks/kernel_capture_overhead.py --repo $W/demo --out "$OUTDIR/kernel-capture.txt"
start=$(now)
abdiff main..pr-v1 --configs mtp --repo $W/demo --cache-dir $W/cache --device cuda --cuda-graph \
  --quiet --format markdown --output "$OUTDIR/cuda-graph-main..pr-v1.md" \
  --json "$OUTDIR/cuda-graph-main..pr-v1.json" --rounds 3 --max-rounds 3 --seed 7
echo "cuda-graph main..pr-v1 exit $? wall $(since "$start") s" | tee -a "$OUTDIR/walltimes.txt"
cp -r "$(ls -td $W/cache/runs/*/ | head -1)" "$OUTDIR/state-cuda-graph"
python3 -m pytest -q -m gpu tests -p no:cacheprovider 2>&1 | tail -15 | tee "$OUTDIR/gpu-tests.txt"
echo done > "$OUTDIR/DONE"
