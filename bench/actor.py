"""One sim actor's rollout throughput: eager against the compiled decision step (CPU), compiled
sim and CUDA graphs (CUDA).

An actor chunk is what the pipeline's actors do between ring hand-offs: T decision steps of B
environments (policy forward and sampling, the opponent, the sim step with auto-reset, the
reward, episode statistics, the slot writes). Every mode runs in this one process on the same
device with the same settings; eager is the baseline and each other mode prints its ratio.

Modes: ``eager``; on the CPU ``step`` (the whole decision step compiled as one function around
the sim's native op, ``SimActor(compile_step=True)``, the pipeline's default there); on CUDA
``compiled`` (the sim step fused with ``torch.compile``) and ``graph`` (compiled sim, the whole
decision step replayed from a captured CUDA graph, the pipeline's default there). "setup" is the time to build the actor and write its first two
chunks (compilation, capture), then chunks are timed until ``--seconds`` have passed.

    python bench/actor.py                    # CPU: 1 actor x 64 envs x 16 steps, crank, shaped
    python bench/actor.py --device cuda --envs 8192 --rollout-len 32
    python bench/actor.py --profile          # and where a decision step's time goes
    python bench/actor.py --profile --compile-agents   # the opponent compiled, as the pipeline runs it

``--profile`` times the parts of the eager step (a compiled step has no parts to time).

The last line is ``RESULT key=value ...``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from actors.sim_actor import SimActor
from agents.scripted import ScriptedAgent
from core.schema import RolloutSpec
from learner import ActionSpec, ActorCritic, PPOConfig
from pipeline.config import pick_device
from pipeline.config.specs import build_agent
from pipeline.transport.ring import RolloutRing
from rewards import make_reward
from sim import ObsLayout, SimConfig

PHASES = (("policy", "policy", "act"), ("opponent", "opponent", "act"), ("sim step", "sim", "step"),
          ("reward", "reward", "compute"), ("statistics", "stats", "update_counts"),
          ("bootstrap value", "policy", "get_value"))
"""What ``--profile`` times inside a decision step: (label, actor attribute, method)."""


def time_phases(actor: SimActor) -> dict[str, float]:
    """Wrap the actor's parts so that each call adds its seconds to the returned dict."""
    spent = {label: 0.0 for label, _, _ in PHASES}
    for label, owner, method in PHASES:
        obj = getattr(actor, owner)
        inner = getattr(obj, method)

        def timed(*args, _inner=inner, _label=label, **kwargs):
            t = time.perf_counter()
            try:
                return _inner(*args, **kwargs)
            finally:
                spent[_label] += time.perf_counter() - t

        object.__setattr__(obj, method, timed)
    return spent


def measure(mode: str, device: str, envs: int, rollout_len: int, opponent: str, reward: str,
            seconds: float, profile: bool = False, compile_agents: bool = False) -> tuple[float, float]:
    """(setup seconds, agent-steps per second) of one actor in ``mode``; with ``profile``
    also prints where a decision step's time goes."""
    cfg = SimConfig()
    layout = ObsLayout.from_config(cfg)
    torch.manual_seed(0)
    start = time.perf_counter()
    # The network the pipeline's actors carry on this device (64x64 on the CPU, 256x256 else).
    hidden = (64, 64) if device == "cpu" else PPOConfig().hidden_sizes
    policy = ActorCritic(layout.size, ActionSpec.for_sim(cfg), hidden).to(device).eval()
    agent = build_agent(opponent, envs, layout, device, sim_config=cfg)
    if compile_agents and isinstance(agent, ScriptedAgent):
        agent.compile()  # as pipeline.launch does on the CPU (run.compile_agents)
    actor = SimActor(
        0, cfg, envs, rollout_len, policy, agent,
        make_reward(reward, device, layout=layout), device=device, seed=1,
        compile_sim=mode in ("compiled", "graph"), cuda_graph=mode == "graph",
        compile_step=mode == "step",
    )
    if mode == "graph" and not actor.uses_cuda_graph:
        raise SystemExit(f"CUDA graph capture failed: {actor.graph_error}")
    ring = RolloutRing(RolloutSpec(rollout_len, envs, layout.size, 3), 2, actor_device=device,
                       learner_device=device)

    def chunk() -> None:
        slot = ring.acquire_write(0)
        actor.rollout(slot)
        if slot.written_event is not None:
            slot.written_event.synchronize()
        ring.commit(slot, 0)
        (got,) = ring.acquire_read(1)
        ring.release(got)

    chunk()
    chunk()
    setup = time.perf_counter() - start
    spent = time_phases(actor) if profile and mode == "eager" else {}
    chunks = 0
    t0 = time.perf_counter()
    while True:
        chunk()
        chunks += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds:
            break
    if spent:
        steps = chunks * rollout_len
        spent["ring hand-off, slot writes, checks, Python"] = elapsed - sum(spent.values())
        print(f"  where a decision step's time goes ({mode}, {envs} envs, {1e3 * elapsed / steps:.3f} ms a step):")
        for label, t in spent.items():
            print(f"    {label:<44} {1e3 * t / steps:7.3f} ms  {t / elapsed:6.1%}")
    return setup, chunks * rollout_len * envs / elapsed


def main(argv: list[str] | None = None) -> None:
    """Parse the command line, time every mode, print the table and the RESULT line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--envs", type=int, default=64)
    p.add_argument("--rollout-len", type=int, default=16)
    p.add_argument("--opponent", default="crank")
    p.add_argument("--reward", default="shaped")
    p.add_argument("--seconds", type=float, default=10.0, help="timed seconds per mode")
    p.add_argument("--quick", action="store_true", help="2 timed seconds per mode")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads on the CPU")
    p.add_argument("--compile-agents", action="store_true",
                   help="compile a scripted opponent's decision, as CPU runs of the pipeline do")
    p.add_argument("--profile", action="store_true",
                   help="also time the parts of a decision step (policy, opponent, sim, reward, ...)")
    args = p.parse_args(argv)
    if args.quick:
        args.seconds = 2.0
    device = pick_device(args.device)
    cuda = device.startswith("cuda")
    if not cuda:
        torch.set_num_threads(args.threads)
    modes = ["eager"] + (["compiled", "graph"] if cuda else ["step"])
    rates: dict[str, float] = {}
    print(f"device {device}, 1 actor x {args.envs} envs x {args.rollout_len} steps, opponent "
          f"{args.opponent}, reward {args.reward}" + ("" if cuda else f", {args.threads} thread(s)"))
    for mode in modes:
        setup, rate = measure(mode, device, args.envs, args.rollout_len, args.opponent, args.reward,
                              args.seconds, args.profile, args.compile_agents)
        rates[mode] = rate
        print(f"{mode:>9}: setup {setup:6.1f}s, {rate:>12,.0f} agent-steps/s, "
              f"{rate / rates['eager']:.2f}x eager", flush=True)
    ratios = " ".join(f"{m}_over_eager={rates[m] / rates['eager']:.2f}" for m in modes[1:])
    print(f"RESULT device={device.split(':')[0]} envs={args.envs} rollout_len={args.rollout_len} "
          + " ".join(f"{m}_agent_steps_per_s={rates[m]:.0f}" for m in modes) + f" {ratios}")


if __name__ == "__main__":
    main()
