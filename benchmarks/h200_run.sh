#!/usr/bin/env bash
# The GPU session of issue 7, as one command on the H200 (device tool):
#   bash benchmarks/h200_run.sh PART
# PART "diffs": main..pr-v1, main..pr and an A/A pr..pr of the mtp suite on CUDA.
# PART "extras": baseline refresh, --cuda-graph run, GPU tests, kernel-capture overhead.
# Everything lands in $OUT/h200-PART.tar.gz (reports, result JSON, run files,
# worker logs), unpacked into results/h200/ on the CPU machine afterwards.
set -uo pipefail
PART=${1:?diffs or extras}
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
W=/tmp/abdiff-h200; OUTDIR=$W/out; mkdir -p "$OUTDIR"
abdiff() { python3 -m abdiff.cli "$@"; }
echo "== machine"; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
python3 -c 'import torch, sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.get_device_name())'
git --version
[ -d $W/demo ] || abdiff demo init $W/demo
if [ "$PART" = diffs ]; then
  for r in main..pr-v1 main..pr pr..pr; do
    start=$(date +%s.%N)
    abdiff "$r" --configs mtp --repo $W/demo --cache-dir $W/cache --device cuda --quiet \
      --format markdown --output "$OUTDIR/$r.md" --json "$OUTDIR/$r.json" --seed 7
    code=$?; end=$(date +%s.%N)
    echo "$r exit $code wall $(python3 -c "print(round($end-$start,1))") s" | tee -a "$OUTDIR/walltimes.txt"
    cp -r "$(ls -td $W/cache/runs/*/ | head -1)" "$OUTDIR/state-$r"
  done
  abdiff compare "$OUTDIR/state-main..pr-v1/a.json" "$OUTDIR/state-main..pr-v1/b.json" --format table
else
  abdiff baseline refresh reference-h200 --rev pr --configs mtp --repo $W/demo --cache-dir $W/cache \
    --device cuda --baselines-dir "$OUTDIR/baselines" --quiet; echo "baseline exit $?"
  start=$(date +%s.%N)
  abdiff main..pr-v1 --configs mtp --repo $W/demo --cache-dir $W/cache --device cuda --cuda-graph \
    --quiet --format markdown --output "$OUTDIR/cuda-graph-main..pr-v1.md" \
    --json "$OUTDIR/cuda-graph-main..pr-v1.json" --rounds 3 --max-rounds 3 --seed 7
  echo "cuda-graph main..pr-v1 exit $? wall $(python3 -c "import time; print(round(time.time()-$start,1))") s" | tee -a "$OUTDIR/walltimes.txt"
  python3 benchmarks/kernel_capture_overhead.py --repo $W/demo --out "$OUTDIR/kernel-capture.txt"
  python3 -m pytest -q -m gpu tests 2>&1 | tail -15 | tee "$OUTDIR/gpu-tests.txt"
fi
tar -C $OUTDIR -czf "$OUT/h200-$PART.tar.gz" .
ls -la "$OUT"
