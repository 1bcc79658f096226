#!/usr/bin/env bash
# Everything that needs a CUDA device, in one go: the GPU tests, then the simulator, actor and
# pipeline benchmarks at GPU scale. Usage: bash bench/gpu.sh [LOG_DIR]   (default bench/gpu-logs)
# Exits non-zero if there is no CUDA device or any step failed; every step runs regardless.
set -uo pipefail
out=${1:-bench/gpu-logs}
mkdir -p "$out"
if ! python -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "bench/gpu.sh: no CUDA device visible to torch" >&2
    exit 2
fi
export PYTHONUNBUFFERED=1
status=0
step() {
    local name=$1; shift
    echo "=== $name: $*"
    "$@" 2>&1 | tee "$out/$name.log"
    local rc=${PIPESTATUS[0]}
    echo "=== $name: exit $rc"
    [ "$rc" -eq 0 ] || status=1
}
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; } \
    | tee "$out/device.txt"
step gpu-tests python -m pytest -m gpu -v -rs -p no:cacheprovider
step sim python bench/sim.py --device cuda
step actor python bench/actor.py --device cuda --envs 8192 --rollout-len 32
step pipeline python bench/pipeline.py --device cuda
exit $status
