"""The PPO learner's update alone: eager against the compiled minibatch loss (``ppo.compile``).

Builds :class:`learner.PPOLearner` with the launcher's resolved defaults for the device (the
sim's observation and action layout, the network, epochs and minibatches, the batch of
``intake.slots_per_batch`` chunks) and times :meth:`~learner.PPOLearner.update` on one fixed
batch (``learner.ddp_smoke.synthetic_batch``: random observations, the policy's own actions)
after ``--warmup`` updates; eager is the baseline and the compiled loss prints its ratio. The learner is what decides the
pipeline's pace when the actors are fast, so this is the ceiling on the learner's samples/s.

    python bench/learner.py                       # CPU defaults, one torch thread
    python bench/learner.py --threads 2
    python bench/learner.py --set hidden_sizes=[128,128] --set update_epochs=4

The last line is ``RESULT key=value ...``.
"""

from __future__ import annotations

import argparse
import ast
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from learner import ActionSpec, PPOLearner
from learner.ddp_smoke import synthetic_batch
from pipeline.config.resolution import resolve
from sim.layout import ObsLayout


def time_updates(compile_loss: bool, overrides: dict, warmup: int, updates: int) -> tuple[float, int, tuple]:
    """Seconds per update, samples per batch and the network's hidden sizes."""
    config = resolve({}, device="cpu")
    ppo = config.ppo.replace(compile=compile_loss, **overrides)
    obs_dim = ObsLayout.from_config(config.sim).size
    learner = PPOLearner(ppo, obs_dim, ActionSpec.for_sim(config.sim))
    steps = config.actors.rollout_len
    batch = synthetic_batch(learner, steps, config.samples_per_batch // steps, seed=0)
    for _ in range(warmup):
        learner.update(batch)
    start = time.perf_counter()
    for _ in range(updates):
        learner.update(batch)
    return (time.perf_counter() - start) / updates, config.samples_per_batch, ppo.hidden_sizes


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    p.add_argument("--warmup", type=int, default=20, help="updates before timing (compilation included)")
    p.add_argument("--updates", type=int, default=100, help="updates timed per mode")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a [ppo] setting, as a Python literal (hidden_sizes=[128,128])")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    overrides = {}
    for kv in args.set:
        key, _, value = kv.partition("=")
        try:
            overrides[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            overrides[key] = value
    results = {}
    for mode in ("eager", "compiled"):
        dt, samples, hidden = time_updates(mode == "compiled", overrides, args.warmup, args.updates)
        results[mode] = dt
        print(f"{mode:9s} {dt * 1000:7.2f} ms per update of {samples:,} samples ({samples / dt:,.0f} samples/s), "
              f"hidden {list(hidden)}", flush=True)
    ratio = results["eager"] / results["compiled"]
    print(f"compiled loss {ratio:.2f}x eager")
    print(f"RESULT device=cpu threads={args.threads} torch={torch.__version__} samples={samples} "
          f"eager_ms={results['eager'] * 1000:.2f} compiled_ms={results['compiled'] * 1000:.2f} ratio={ratio:.3f}")


if __name__ == "__main__":
    main()
