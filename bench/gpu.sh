#!/usr/bin/env bash
# Everything that needs a CUDA device, in one go: the GPU tests, the simulator, actor and pipeline
# benchmarks at GPU scale, then the default launch on the GPU with the profiler and the CUDA
# allocator's counters sampled while it runs, and the overlap report of its trace.
#
# Usage: bash bench/gpu.sh [LOG_DIR]   (default bench/gpu-logs)
# Knobs (environment): STEP_TIMEOUT seconds per step (default 0: none; a step past it gets SIGTERM,
# which the launcher answers with a checkpoint), SIM_SIZES (bench/sim.py --sizes; default its own),
# LAUNCH_STEPS (the launch's --total-steps; default 20000000), METRICS_PORT (default 9400),
# STEPS (space-separated subset of: tests sim actor pipeline learner launch learn plain; default
# all but learner, the PPO update alone on the GPU defaults' batch, eager against compiled, learn,
# a default launch of LEARN_STEPS (default 60M) agent-steps with LEARN_ARGS and its fighter's
# evaluation against crank and random, and plain, the same launch as `launch` without the
# profiler, to tell the profiler's cost from the run's), TESTS (pytest paths or node ids; default
# every module holding gpu-marked tests), ACTOR_SECONDS (default 10),
# PIPELINE_ARGS (more arguments for bench/pipeline.py, e.g. "--set ppo.compile=true"), SIM_ARGS
# (more arguments for bench/sim.py, e.g. "--backend torch --peer-work"); league (not in the
# default): the league bench (bench/learn_league.py, seed LEAGUE_SEED, default 0) trained on the GPU
# with the CPU run's learning sizes (4 actors x 64 envs x 16 steps, 3 epochs of 2 minibatches,
# learning rate 1e-3), a checkpoint every 20 s, so its learning curve gives the wall time to 95 %
# against crank and random on the GPU (LEAGUE_ARGS: more bench arguments).
# Exits non-zero if there is no CUDA device or any step failed; every step runs regardless.
# Each compiled sim size compiles for about 48 s on a fresh H100 machine (bench/RESULTS.md), so on a
# machine held for a few minutes give the sizes and a limit per step, e.g.
#   STEP_TIMEOUT=150 SIM_SIZES=1048576,4194304 ACTOR_SECONDS=5 bash bench/gpu.sh LOG_DIR
set -uo pipefail
out=${1:-bench/gpu-logs}
mkdir -p "$out"
if ! python -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "bench/gpu.sh: no CUDA device visible to torch" >&2
    exit 2
fi
export PYTHONUNBUFFERED=1
limit=${STEP_TIMEOUT:-0}
steps=" ${STEPS:-tests sim actor pipeline launch} "
port=${METRICS_PORT:-9400}
status=0
step() {
    local name=$1; shift
    echo "=== $name: $* ($(date -u +%T))"
    timeout --signal=TERM --kill-after=20 "$limit" "$@" 2>&1 | tee "$out/$name.log"
    local rc=${PIPESTATUS[0]}
    echo "=== $name: exit $rc ($(date -u +%T))"
    [ "$rc" -eq 0 ] || status=1
}
wanted() { [[ $steps == *" $1 "* ]]; }
# The CUDA allocator's counters from the launch's own Prometheus exporter, every 5 s: the number of
# allocation requests grows with the work, cudaMalloc calls (segments) stay flat after warm-up.
sample_allocator() {
    python - "$port" <<'EOF'
import sys, time, urllib.request
url = f"http://127.0.0.1:{sys.argv[1]}/metrics"
keys = ("midrange_cuda_allocations_total", "midrange_cuda_segment_allocations_total",
        "midrange_cuda_memory_reserved_bytes", "midrange_cuda_alloc_retries_total",
        "midrange_pinned_host_allocations_total", "midrange_actor_agent_steps_total")
start = time.time()
while True:
    time.sleep(5)
    try:
        text = urllib.request.urlopen(url, timeout=2).read().decode()
    except OSError:
        continue
    seen = {}
    for line in text.splitlines():
        for k in keys:
            if line.startswith(k):
                name = k.removeprefix("midrange_")
                seen[name] = seen.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    print(f"t={time.time() - start:6.1f}s " + " ".join(f"{k}={v:.0f}" for k, v in seen.items()), flush=True)
EOF
}

{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; } \
    | tee "$out/device.txt"
# Only the modules that hold gpu-marked tests are collected (the others may import optional extras).
wanted tests && step gpu-tests python -m pytest -m gpu -v -rs -p no:cacheprovider ${TESTS:-$(grep -l "pytest.mark.gpu" tests/test_*.py)}
# --profile: the compiled step's kernels by device time at the largest size.
wanted sim && step sim python bench/sim.py --device cuda --profile ${SIM_SIZES:+--sizes "$SIM_SIZES"} ${SIM_ARGS:-}
wanted actor && step actor python bench/actor.py --device cuda --envs 8192 --rollout-len 32 \
    --seconds "${ACTOR_SECONDS:-10}"
wanted pipeline && step pipeline python bench/pipeline.py --device cuda --quick ${PIPELINE_ARGS:-}
wanted learner && step learner python bench/learner.py --device cuda --warmup 5 --updates 20
if wanted launch; then
    rm -rf "$out/run"
    sample_allocator > "$out/allocator.log" 2>&1 &
    sampler=$!
    step launch python -m pipeline.launch --actors 4 --device cuda --profile 5 \
        --total-steps "${LAUNCH_STEPS:-20000000}" --run-dir "$out/run" --display plain \
        --metrics-port "$port"
    kill "$sampler" 2>/dev/null
    cat "$out/allocator.log"
    step overlap python -m monitoring.overlap "$out/run/trace.json"
fi
if wanted learn; then
    # What the GPU defaults learn: a default launch of LEARN_STEPS agent-steps (LEARN_ARGS: more
    # launcher arguments, e.g. a recipe to try), then its fighter against crank and random.
    rm -rf "$out/run-learn"
    step learn python -m pipeline.launch --actors 4 --device cuda --total-steps "${LEARN_STEPS:-60000000}" \
        --run-dir "$out/run-learn" --display plain --metrics-port -1 --set run.eval_episodes=0 ${LEARN_ARGS:-}
    step learn-eval python -m pipeline.evaluate --agent "$out/run-learn" --opponents crank,random \
        --episodes 400 --seed 1000 --device cuda
fi
if wanted league; then
    # The bench's own recipe and budget, the CPU's sizes: what changes is the device.
    rm -rf "$out/run-league"
    step league python bench/learn_league.py --seed "${LEAGUE_SEED:-0}" --run-dir "$out/run-league" \
        --checkpoint-s 20 --set run.device=cuda --set actors.envs_per_actor=64 --set actors.rollout_len=16 \
        --set ppo.update_epochs=3 --set ppo.num_minibatches=2 --set ppo.learning_rate=1e-3 \
        --set ppo.entropy_coef=0.003 ${LEAGUE_ARGS:-}
fi
if wanted plain; then
    rm -rf "$out/run-plain"
    step plain python -m pipeline.launch --actors 4 --device cuda \
        --total-steps "${LAUNCH_STEPS:-20000000}" --run-dir "$out/run-plain" --display plain \
        --metrics-port -1
fi
exit $status
