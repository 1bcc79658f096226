"""The PPO learner's update alone: eager against the compiled minibatch loss (``ppo.compile``).

Builds :class:`learner.PPOLearner` with the launcher's resolved defaults for the device (the
sim's observation and action layout, the network, epochs and minibatches, the batch of
``intake.slots_per_batch`` chunks; the update of the run after its teacher's first quarter,
unless ``--set ppo.teacher_coef=1`` asks for the taught one) and times :meth:`~learner.PPOLearner.update` on one fixed
batch (``learner.ddp_smoke.synthetic_batch``: random observations, the policy's own actions)
after ``--warmup`` updates; eager is the baseline and the compiled loss prints its ratio. The
learner is what decides the pipeline's pace when the actors are fast, so this is the ceiling on
the learner's samples/s (on one H100 the whole pipeline ran at 3.3M agent-steps/s with its
learner at 3.4M samples/s of update time: bench/RESULTS.md, "First runs on a GPU"). ``--set``
takes what the launcher's does, resolved the same way; ``--device cuda`` times the GPU
defaults' batch on the GPU.

    python bench/learner.py                       # CPU defaults, one torch thread
    python bench/learner.py --device cuda --set ppo.bf16=true
    python bench/learner.py --threads 2
    python bench/learner.py --set 'ppo.hidden_sizes=[128,128]' --set ppo.update_epochs=4

The last line is ``RESULT key=value ...``.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from learner import ActionSpec, PPOLearner
from learner.ddp_smoke import synthetic_batch
from pipeline.config.devices import pick_device
from pipeline.config.errors import ConfigError
from pipeline.config.files import apply_override, parse_value
from pipeline.config.resolution import resolve
from pipeline.run.sim_actors import make_teacher
from sim.layout import ObsLayout


def time_updates(compile_loss: bool, data: dict, warmup: int, updates: int,
                 device: str = "cpu") -> tuple[float, int, tuple]:
    """Seconds per update, samples per batch and the network's hidden sizes, for the config
    ``data`` (a launcher config as nested tables) resolved on ``device`` with ``ppo.compile``
    set."""
    data = copy.deepcopy(data)
    apply_override(data, "ppo.compile", compile_loss)
    if "teacher_coef" not in data.get("ppo", {}):
        apply_override(data, "ppo.teacher_coef", 0.0)  # the update of the run's last three quarters
    config = resolve(data, device=device)
    layout = ObsLayout.from_config(config.sim)

    teacher = make_teacher(config, layout, torch.device(device)) if config.ppo.teacher else None
    learner = PPOLearner(config.ppo, layout.size, ActionSpec.for_sim(config.sim), device=device, teacher=teacher)
    steps = config.actors.rollout_len
    batch = synthetic_batch(learner, steps, config.samples_per_batch // steps, seed=0)

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)

    for _ in range(warmup):
        learner.update(batch)
    sync()
    start = time.perf_counter()
    for _ in range(updates):
        learner.update(batch)
    sync()
    return (time.perf_counter() - start) / updates, config.samples_per_batch, config.ppo.hidden_sizes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N (default cpu)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    p.add_argument("--warmup", type=int, default=20, help="updates before timing (compilation included)")
    p.add_argument("--updates", type=int, default=100, help="updates timed per mode")
    p.add_argument("--matmul-precision", choices=("highest", "high", "medium"), default="highest",
                   help="torch.set_float32_matmul_precision for the whole run (high: TF32 matmuls on a "
                        "GPU that has them; default highest, what the pipeline uses)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="a config value as pipeline.launch takes it ('ppo.hidden_sizes=[128,128]')")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.set_float32_matmul_precision(args.matmul_precision)
    data: dict = {}
    results = {}
    try:
        for kv in args.set:
            key, _, value = kv.partition("=")
            apply_override(data, key, parse_value(value))
        device = pick_device(args.device)
        resolve(data, device=device)  # a bad value stops here, in one line, before any timing
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for mode in ("eager", "compiled"):
        dt, samples, hidden = time_updates(mode == "compiled", data, args.warmup, args.updates, device)
        results[mode] = dt
        print(f"{mode:9s} {dt * 1000:7.2f} ms per update of {samples:,} samples ({samples / dt:,.0f} samples/s), "
              f"hidden {list(hidden)}", flush=True)
    ratio = results["eager"] / results["compiled"]
    print(f"compiled loss {ratio:.2f}x eager")
    print(f"RESULT device={device.split(':')[0]} threads={args.threads} torch={torch.__version__} samples={samples} "
          f"matmul_precision={args.matmul_precision} eager_ms={results['eager'] * 1000:.2f} compiled_ms={results['compiled'] * 1000:.2f} ratio={ratio:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
