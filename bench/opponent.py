"""A policy opponent's decision: the network's ``act`` against ``act_only``.

A league's past selves, the kickstarting teacher and a cockpit seat fly a side with a policy
network (:class:`agents.PolicyAgent`) and need its actions only. ``ActorCritic.act`` also runs
the critic and the log-probability of the chosen action, which an actor storing a rollout
needs; ``act_only`` skips both and draws the same random numbers, so it samples the same
actions. This times one decision of each on the same network, observations and generator
state, alternating the two in rounds so both see the same machine; ``act`` is the baseline and
``act_only`` prints its ratio. The league's actors call an opponent per group of 16
environments (``league.groups_per_actor`` 4 of an actor's 64), the teacher once per batch.

    python bench/opponent.py                          # 128x128, batches 16 and 64, one thread
    python bench/opponent.py --hidden 64,64 --batches 16,64,2048

The last line is ``RESULT key=value ...``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from learner import ActionSpec, ActorCritic
from sim import SimConfig
from sim.layout import ObsLayout


def _ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def time_calls(call: Callable[[], object], seconds: float) -> float:
    """Seconds per call of ``call()``, timed for about ``seconds``."""
    n, start = 0, time.perf_counter()
    while True:
        call()
        n += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return elapsed / n


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hidden", type=_ints, default=[128, 128], help="hidden widths (default 128,128)")
    p.add_argument("--batches", type=_ints, default=[16, 64], help="observations per call (default 16,64)")
    p.add_argument("--seconds", type=float, default=1.0, help="timed seconds per mode per round")
    p.add_argument("--rounds", type=int, default=5, help="rounds, each timing both modes")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = p.parse_args(argv)
    if args.seconds <= 0 or args.rounds < 1 or args.threads < 1:
        p.error("--seconds must be positive, --rounds and --threads at least 1")
    torch.set_num_threads(args.threads)
    sim = SimConfig()
    layout = ObsLayout.from_config(sim)
    torch.manual_seed(0)
    net = ActorCritic(layout.size, ActionSpec.for_sim(sim), hidden_sizes=tuple(args.hidden)).eval()
    print(f"device cpu, {args.threads} thread(s), torch {torch.__version__}, network {args.hidden}, "
          f"{layout.size} observations; {args.rounds} rounds of {args.seconds:g} s per mode", flush=True)
    fields = [f"hidden={'x'.join(map(str, args.hidden))}"]
    for batch in args.batches:
        obs = torch.randn(batch, layout.size)
        same = torch.equal(net.act(obs, generator=torch.Generator().manual_seed(1))[0],
                           net.act_only(obs, generator=torch.Generator().manual_seed(1)))
        if not same:
            print(f"batch {batch}: act_only chose other actions than act from the same generator state")
            return 1
        g = torch.Generator().manual_seed(2)
        full: list[float] = []
        only: list[float] = []
        for _ in range(args.rounds):
            full.append(time_calls(partial(net.act, obs, generator=g), args.seconds))
            only.append(time_calls(partial(net.act_only, obs, generator=g), args.seconds))
        full_us, only_us = 1e6 * min(full), 1e6 * min(only)
        ratio = full_us / only_us
        print(f"  batch {batch:5d}: act {full_us:8.1f} us, act_only {only_us:8.1f} us per call, "
              f"{ratio:.2f}x (best of {args.rounds} rounds; the same actions)", flush=True)
        fields += [f"act_us_{batch}={full_us:.1f}", f"act_only_us_{batch}={only_us:.1f}",
                   f"ratio_{batch}={ratio:.3f}"]
    print("RESULT " + " ".join(fields))
    return 0


if __name__ == "__main__":
    sys.exit(main())
