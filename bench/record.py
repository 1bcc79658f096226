"""What recording costs the batched sim: decision steps per second of a ``BatchedSim`` with and
without a :class:`sim.replay.recorder.Recorder` on a few of its environments, in the same run.

Random actions (fire with probability 0.05), drawn in advance; the recorder writes every
episode of its environments into replay files in a temporary folder (the host copy and the
file writing happen every ``--chunk`` decisions, inside the timing). Rows alternate, best of
``--slices`` slices each, since the machine is shared.

Usage: ``python bench/record.py [--envs 1024] [--record 4] [--steps 256]``. The last line is
``RESULT ...`` with the recorded run's steps/s as a fraction of the plain one.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.evaluation.recording import replay_header
from sim import BatchedSim, SimConfig
from sim.replay.format import ReplayWriter
from sim.replay.recorder import Recorder


def _run(envs: int, record: int, steps: int, chunk: int, actions: list[torch.Tensor], folder: Path) -> tuple[float, int]:
    sim = BatchedSim(envs, SimConfig(), seed=1)
    recorder = None
    if record:
        def open_episode(env: int, episode: int) -> ReplayWriter:
            return ReplayWriter(folder / f"e{env}-{episode}.replay", replay_header(sim, env, episode, "random", "random"))

        recorder = Recorder(sim, list(range(record)), open_episode, chunk_steps=chunk)
    sim.reset()
    t0 = time.perf_counter()
    for a in actions[:steps]:
        sim.step(a)
    if recorder is not None:
        recorder.flush()
    wall = time.perf_counter() - t0
    written = len(recorder.replays_written) if recorder is not None else 0
    if recorder is not None:
        recorder.close()
    return steps / wall, written


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--envs", type=int, default=1024)
    p.add_argument("--record", type=int, default=4, help="environments recorded")
    p.add_argument("--steps", type=int, default=256, help="decision steps per slice")
    p.add_argument("--chunk", type=int, default=64, help="decisions between host copies")
    p.add_argument("--slices", type=int, default=5)
    args = p.parse_args()
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    actions = []
    for _ in range(args.steps):
        a = torch.stack([torch.randint(0, 3, (args.envs, 2), generator=g), torch.randint(0, 3, (args.envs, 2), generator=g),
                         (torch.rand(args.envs, 2, generator=g) < 0.05).long()], dim=-1)
        actions.append(a)
    print(f"# {args.envs} envs, {args.record} recorded, chunk {args.chunk}, {os.cpu_count()} cores, "
          f"load average at start {os.getloadavg()[0]:.2f}")
    best = {"plain": 0.0, "recorded": 0.0}
    replays = 0
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.slices):
            for label, record in (("plain", 0), ("recorded", args.record)):
                rate, written = _run(args.envs, record, args.steps, args.chunk, actions, Path(tmp))
                best[label] = max(best[label], rate)
                replays += written
    for label, rate in best.items():
        print(f"{label:>9}: {rate:8.1f} decision steps/s ({rate * args.envs:,.0f} env-decisions/s)")
    print(f"# {replays} replays written; load average at end {os.getloadavg()[0]:.2f}")
    print(f"RESULT envs={args.envs} recorded={args.record} plain_steps_per_s={best['plain']:.1f} "
          f"recorded_steps_per_s={best['recorded']:.1f} ratio={best['recorded'] / best['plain']:.3f}")


if __name__ == "__main__":
    main()
