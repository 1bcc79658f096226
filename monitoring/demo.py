"""A small real training-like run that drives every metric through the facade and the exporter.

Usage: ``python -m monitoring.demo --seconds 5 [--metrics-port 0] [--profile RUN_DIR]``

Actors (threads) fly the batched sim (``sim.BatchedSim``) with a tiny policy against the pursuit
autopilot and write chunks into the real rollout ring (``pipeline.ring.RolloutRing``); a learner
thread takes chunks, drops stale ones, runs a clipped policy-gradient update on a tiny MLP and
publishes new weights. It exists to watch the dashboards and to test the monitoring stack end to
end without the full pipeline; it is not a trainer. The first output line is
``metrics: http://ADDR:PORT/metrics``.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Sequence

import torch
from torch import nn

from monitoring import Metrics, ProfileSession, span
from monitoring.exporter import DEFAULT_ADDR, DEFAULT_PORT, MetricsPortInUseError, start_exporter
from pipeline.ring import RingClosed, RolloutRing, SlotSpec
from sim import BatchedSim, SimConfig
from sim.autopilot import pursuit_actions

ACTION_SIZES = (3, 3, 2)  # rudder, throttle, fire


class TinyPolicy(nn.Module):
    """Actor-critic MLP over the three discrete action components."""

    def __init__(self, obs_dim: int, hidden: int = 32) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh())
        self.logits = nn.Linear(hidden, sum(ACTION_SIZES))
        self.value = nn.Linear(hidden, 1)

    def dists(self, obs: torch.Tensor) -> tuple[list[torch.distributions.Categorical], torch.Tensor]:
        """Per-component categorical distributions and the value estimate."""
        h = self.body(obs)
        parts = torch.split(self.logits(h), ACTION_SIZES, dim=-1)
        return [torch.distributions.Categorical(logits=p) for p in parts], self.value(h).squeeze(-1)


class Demo:
    """Actors and a learner in threads around one ring, reporting to ``metrics``."""

    def __init__(self, metrics: Metrics, actors: int, envs: int, rollout_len: int,
                 episode_s: float, max_lag: int, profile: ProfileSession | None,
                 device: str = "cpu", ring_placement: str = "auto") -> None:
        self.metrics = metrics
        self.profile = profile
        self.max_lag = max_lag
        self.device = torch.device(device)
        self.config = SimConfig(max_time_s=episode_s)
        self.sims = [BatchedSim(envs, self.config, device=self.device, seed=i) for i in range(actors)]
        obs_dim = self.sims[0].obs_dim
        self.ring = RolloutRing(SlotSpec(rollout_len, envs, obs_dim, 3), num_slots=2 * actors,
                                placement=ring_placement, actor_device=self.device,
                                learner_device=self.device)
        # A host ring with device actors means every chunk crosses the bus twice.
        self.crosses_bus = self.ring.device.type != self.device.type
        metrics.watch_ring(self.ring)
        self.policy = TinyPolicy(obs_dim).to(self.device)
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=3e-4)
        self.version = 0
        self._weights = {k: v.clone() for k, v in self.policy.state_dict().items()}
        self._weights_lock = threading.Lock()
        self.stop = threading.Event()
        self.errors: list[BaseException] = []

    # ---- actors ---------------------------------------------------------------------------
    def actor(self, i: int) -> None:
        """Fill ring slots with chunks until stopped."""
        sim, metrics, ring = self.sims[i], self.metrics, self.ring
        policy, version = TinyPolicy(sim.obs_dim).to(self.device), -1
        obs = sim.reset()
        T, B = ring.spec.rollout_len, ring.spec.num_envs
        while not self.stop.is_set():
            start = time.perf_counter()
            slot = ring.acquire_write(i, timeout=0.2)
            metrics.observe_slot_wait(i, time.perf_counter() - start)
            if slot is None:
                continue
            with span(f"actor:{i}:rollout"):
                with self._weights_lock:
                    if version != self.version:
                        policy.load_state_dict(self._weights)
                        version = self.version
                for t in range(T):
                    with torch.no_grad():
                        dists, value = policy.dists(obs[:, 0])
                        action = torch.stack([d.sample() for d in dists], -1)
                        log_prob = sum(d.log_prob(a) for d, a in zip(dists, action.unbind(-1), strict=True))
                    opponent = pursuit_actions(obs[:, 1], sim.layout)
                    out = sim.step(torch.stack([action, opponent], 1))
                    slot.obs[t] = obs[:, 0]
                    slot.actions[t] = action
                    slot.log_probs[t] = log_prob
                    slot.values[t] = value
                    slot.bootstrap_values[t] = value
                    slot.rewards[t] = out.reward[:, 0]
                    slot.terminated[t] = out.terminated
                    slot.truncated[t] = out.truncated
                    done = out.done
                    metrics.record_episodes(
                        i, "pursuit",
                        wins=(done & (out.winner == 0)).sum(),
                        draws=(done & (out.winner == 2)).sum(),
                        losses=(done & (out.winner == 1)).sum(),
                        lengths=out.episode_steps, done_mask=done,
                    )
                    obs = out.obs.clone()
                with torch.no_grad():
                    slot.next_values.copy_(policy.dists(obs[:, 0])[1])
            ring.commit(slot, version)
            metrics.add_actor_steps(i, T * B, T * B * sim.physics_steps_per_decision)
            if self.crosses_bus:
                metrics.add_copy_bytes("d2h", slot.nbytes())

    # ---- learner --------------------------------------------------------------------------
    def learner(self) -> None:
        """Consume chunks, update the policy, publish weights, until stopped."""
        metrics, ring = self.metrics, self.ring
        while not self.stop.is_set():
            start = time.perf_counter()
            slots = ring.acquire_read(1, timeout=0.2)
            metrics.observe_batch_wait(time.perf_counter() - start)
            if slots is None:
                continue
            slot = slots[0]
            lag = self.version - slot.policy_version
            metrics.observe_policy_lag([lag])
            if lag > self.max_lag:
                ring.drop(slot)
                metrics.add_dropped_chunks(1, "stale")
                continue
            with span("learner:copy"):
                # copy=True: with the ring on the learner's device .to() would alias the slot.
                batch = {name: getattr(slot, name).to(self.device, copy=True) for name in (
                    "obs", "actions", "log_probs", "values", "rewards", "terminated", "next_values")}
            if self.crosses_bus:
                metrics.add_copy_bytes("h2d", slot.nbytes())
            # The batch is the learner's own copy: the slot can go back to the actors now.
            ring.release(slot)
            with span("learner:update"):
                stats = self.update(batch)
            metrics.add_learner_samples(ring.spec.samples)
            metrics.observe_update(stats, self.version)
            if self.profile is not None:
                self.profile.step()

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """One clipped policy-gradient step on a chunk; returns the learner statistics."""
        obs = batch["obs"].reshape(-1, batch["obs"].shape[-1])
        actions = batch["actions"].reshape(-1, 3)
        old_log_prob = batch["log_probs"].reshape(-1)
        rewards, terminated = batch["rewards"], batch["terminated"]
        # Discounted returns, cut at episode ends, bootstrapped from the chunk's next values.
        returns = torch.empty_like(rewards)
        running = batch["next_values"].clone()
        for t in reversed(range(rewards.shape[0])):
            running = rewards[t] + 0.99 * running * (~terminated[t]).float()
            returns[t] = running
        returns = returns.reshape(-1)
        dists, value = self.policy.dists(obs)
        log_prob = sum(d.log_prob(a) for d, a in zip(dists, actions.unbind(-1), strict=True))
        entropy = sum(d.entropy() for d in dists).mean()
        advantage = returns - batch["values"].reshape(-1)
        ratio = torch.exp(log_prob - old_log_prob)
        clipped = torch.clamp(ratio, 0.8, 1.2)
        loss_policy = -torch.min(ratio * advantage, clipped * advantage).mean()
        loss_value = 0.5 * (returns - value).pow(2).mean()
        loss = loss_policy + 0.5 * loss_value - 0.01 * entropy
        self.optimizer.zero_grad()
        loss.backward()
        grad_norm = nn.utils.clip_grad_norm_(self.policy.parameters(), 1.0)
        self.optimizer.step()
        with self._weights_lock:
            self._weights = {k: v.detach().clone() for k, v in self.policy.state_dict().items()}
            self.version += 1
        with torch.no_grad():
            var = returns.var()
            explained = 1.0 - (returns - value).var() / var if var > 0 else torch.zeros(())
            return {
                "loss_policy": float(loss_policy),
                "loss_value": float(loss_value),
                "entropy": float(entropy),
                "approx_kl": float(((ratio - 1) - (log_prob - old_log_prob)).mean()),
                "clip_fraction": float(((ratio - 1).abs() > 0.2).float().mean()),
                "explained_variance": float(explained),
                "grad_norm": float(grad_norm),
                "learning_rate": self.optimizer.param_groups[0]["lr"],
                "return_mean": float(returns.mean()),
            }

    # ---- run ------------------------------------------------------------------------------
    def run(self, seconds: float) -> None:
        """Run actors and learner for ``seconds``; re-raise the first thread error."""
        def guard(fn, *args) -> None:
            try:
                fn(*args)
            except BaseException as exc:
                if isinstance(exc, RingClosed) and self.stop.is_set():
                    return  # the run is ending: the ring woke a waiting thread
                self.errors.append(exc)
                self.stop.set()

        threads = [threading.Thread(target=guard, args=(self.actor, i), name=f"actor-{i}", daemon=True)
                   for i in range(len(self.sims))]
        threads.append(threading.Thread(target=guard, args=(self.learner,), name="learner", daemon=True))
        for th in threads:
            th.start()
        try:
            self.stop.wait(seconds)
        except KeyboardInterrupt:  # Ctrl-C ends the run early but still cleanly
            pass
        finally:
            self.stop.set()
            self.ring.close()
            # Threads must leave torch before the interpreter shuts down under them.
            for th in threads:
                th.join(timeout=30)
        if self.profile is not None:
            self.profile.close()
        if self.errors:
            raise self.errors[0]


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    p = argparse.ArgumentParser(prog="python -m monitoring.demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=10.0, help="how long actors and learner run")
    p.add_argument("--linger-s", type=float, default=0.0, help="keep exporting this long after the run")
    p.add_argument("--actors", type=int, default=2)
    p.add_argument("--envs", type=int, default=32, help="environments per actor")
    p.add_argument("--rollout-len", type=int, default=8, help="decision steps per chunk")
    p.add_argument("--episode-s", type=float, default=15.0, help="sim time limit of an episode")
    p.add_argument("--max-policy-lag", type=int, default=1, help="older chunks are dropped")
    p.add_argument("--device", default="cpu", help="device of sims, policies and learner")
    p.add_argument("--ring", default="auto", choices=("auto", "device", "pinned", "shared"),
                   help="ring placement (pinned: chunks cross the bus, copy bytes are counted)")
    p.add_argument("--metrics-addr", default=DEFAULT_ADDR)
    p.add_argument("--metrics-port", type=int, default=DEFAULT_PORT, help="0: any free port")
    p.add_argument("--profile", metavar="RUN_DIR", default="", help="record learner iterations into RUN_DIR/trace.json")
    p.add_argument("--profile-iterations", type=int, default=4)
    args = p.parse_args(argv)
    for name in ("seconds", "episode_s"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be > 0")
    for name in ("actors", "envs", "rollout_len"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    metrics = Metrics()
    try:
        exporter = start_exporter(metrics, addr=args.metrics_addr, port=args.metrics_port)
    except MetricsPortInUseError as exc:
        print(f"error: {exc.strerror}", file=sys.stderr)
        return 2
    print(f"metrics: {exporter.url}", flush=True)
    profile = ProfileSession(args.profile, iterations=args.profile_iterations, warmup=2,
                             metrics=metrics) if args.profile else None
    try:
        demo = Demo(metrics, args.actors, args.envs, args.rollout_len, args.episode_s,
                    args.max_policy_lag, profile, device=args.device, ring_placement=args.ring)
        demo.run(args.seconds)
        snap = metrics.snapshot()
        print(f"agent_steps={sum(snap.agent_steps.values())} updates={snap.learner_updates} "
              f"episodes={sum(snap.episodes.values())} overlap={snap.overlap_ratio}", flush=True)
        if args.linger_s > 0:
            time.sleep(args.linger_s)
    finally:
        exporter.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
