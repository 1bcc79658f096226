"""``render_mode="rgb_array"`` frame rate: pictures per second of ``Midrange-v0``'s ``render()``
at 640×480, the figure a video needs (≥ 30 frames/s).

An episode of ``Midrange-v0`` (red flies random actions against the default opponent) is
played with a ``render()`` after every step, as Gymnasium's ``RecordVideo`` does. Timed apart:
``render()`` alone (the drawing: threat regions, tracks, missiles, text) and a whole
``step() + render()``. The machine is shared, so each figure is the best of ``--slices``
slices of ``--frames`` frames, with the load average and this process's CPU time share, and
the CPU time per frame (independent of other load).

Usage: ``python bench/render.py [--frames 200] [--slices 5]``. The last line printed is
``RESULT render_fps=... step_render_fps=...``.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import gymnasium
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sim  # noqa: F401  (registers Midrange-v0)


def _advance(env: gymnasium.Env) -> None:
    """One step of random actions, resetting at the episode's end."""
    _, _, terminated, truncated, _ = env.step(env.action_space.sample())
    if terminated or truncated:
        env.reset()


def _slice(env: gymnasium.Env, frames: int, with_step: bool) -> tuple[float, float]:
    """Wall and CPU seconds of ``frames`` renders, each after a step; the step is timed too
    if ``with_step``."""
    wall = cpu = 0.0
    for _ in range(frames):
        if not with_step:
            _advance(env)  # a new picture each time, the fight advanced outside the timing
        w0, c0 = time.perf_counter(), time.process_time()
        if with_step:
            _advance(env)
        frame = env.render()
        wall += time.perf_counter() - w0
        cpu += time.process_time() - c0
        assert frame is not None and frame.shape == (480, 640, 3)
    return wall, cpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frames", type=int, default=200)
    p.add_argument("--slices", type=int, default=5)
    args = p.parse_args()
    torch.set_num_threads(1)
    env = gymnasium.make("Midrange-v0", render_mode="rgb_array")
    env.action_space.seed(0)
    env.reset(seed=0)
    env.render()  # the missile tables of the threat regions are built once, untimed
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"load average at start {os.getloadavg()[0]:.2f}")
    best = {}
    for label, with_step in (("render", False), ("step_render", True)):
        results = [_slice(env, args.frames, with_step) for _ in range(args.slices)]
        wall, cpu = min(results)
        fps = args.frames / wall
        best[label] = fps
        print(f"{label:>12}: {fps:7.1f} frames/s (best of {args.slices} slices of {args.frames}), "
              f"{cpu / args.frames * 1e3:5.2f} ms CPU per frame, CPU share {cpu / wall:.0%}")
    print(f"# load average at end {os.getloadavg()[0]:.2f}")
    env.close()
    print(f"RESULT render_fps={best['render']:.1f} step_render_fps={best['step_render']:.1f} size=640x480")


if __name__ == "__main__":
    main()
