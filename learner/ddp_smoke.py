"""Data-parallel smoke run: ``python -m torch.distributed.run --nproc_per_node 2 -m learner.ddp_smoke``.

Every rank trains its own replica on different synthetic batches for a few updates; rank 0 then
reports, as JSON, how far apart the ranks' parameters and observation statistics are (they must
be identical), how far they moved from the initialization, and which checkpoint files exist
(only rank 0 writes). Every rank closes the process group on the way out and fails if the group
is still referenced afterwards (see :func:`learner.distributed.shutdown`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torch.distributed as dist

from learner.batch import RolloutBatch
from learner.checkpoint import save_checkpoint
from learner.distributed import init_from_env, rank, shutdown, world_size
from learner.ppo import PPOLearner
from learner.ppo_config import PPOConfig
from learner.spaces import ActionSpec


def synthetic_batch(learner: PPOLearner, t: int, b: int, seed: int) -> RolloutBatch:
    """A batch acted by ``learner``'s policy on random observations with random rewards, on the
    learner's device (drawn on the CPU, so the same seed gives the same batch on any device)."""
    g = torch.Generator().manual_seed(seed)
    d = learner.policy.obs_dim
    obs = torch.randn(t, b, d, generator=g) * 3.0 + float(seed % 5)
    u = torch.rand(t, b, generator=g)
    rewards, bootstrap, next_values = torch.randn(t, b, generator=g), torch.randn(t, b, generator=g), \
        torch.randn(b, generator=g)
    obs = obs.to(learner.device)
    actions, log_probs, values = learner.policy.act(obs.reshape(t * b, d))
    on = learner.device
    return RolloutBatch(
        obs=obs, actions=actions.reshape(t, b, -1), log_probs=log_probs.reshape(t, b),
        values=values.reshape(t, b), rewards=rewards.to(on),
        terminated=(u < 0.05).to(on), truncated=((u >= 0.05) & (u < 0.08)).to(on),
        bootstrap_values=bootstrap.to(on), next_values=next_values.to(on),
        policy_versions=torch.full((b,), learner.policy_version, dtype=torch.int64, device=on),
    )


def main(argv: list[str] | None = None) -> None:
    """Run the smoke check; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--updates", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True, help="JSON report (written by rank 0)")
    parser.add_argument("--checkpoint-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    init_from_env("cpu")
    try:
        _train_and_report(args)
    finally:
        # On every path: a group left open keeps gloo threads running into interpreter teardown.
        # Also fails the run if something still holds the group (see learner.distributed).
        shutdown()


def _train_and_report(args: argparse.Namespace) -> None:
    """Train, checkpoint, gather every rank's state and write rank 0's report."""
    cfg = PPOConfig(hidden_sizes=(32, 32), num_minibatches=2, update_epochs=2, total_updates=10,
                    seed=rank() * 100)  # different seeds: the broadcast from rank 0 must align them
    learner = PPOLearner(cfg, 10, ActionSpec("multi_discrete", nvec=(3, 3, 2)))
    initial = torch.nn.utils.parameters_to_vector(learner.policy.parameters()).detach().clone()
    for i in range(args.updates):
        learner.update(synthetic_batch(learner, 16, 4, seed=1000 * rank() + i))
    save_checkpoint(args.checkpoint_dir, learner)
    state = torch.cat([torch.nn.utils.parameters_to_vector(learner.policy.parameters()).detach(),
                       learner.policy.obs_norm.mean, learner.policy.obs_norm.var])
    gathered = [torch.zeros_like(state) for _ in range(world_size())]
    if world_size() > 1:
        dist.all_gather(gathered, state)
    else:
        gathered = [state]
    if rank() == 0:
        n_params = initial.numel()
        report = {
            "world_size": world_size(),
            "policy_version": learner.policy_version,
            "max_param_diff": max(float((g[:n_params] - state[:n_params]).abs().max()) for g in gathered),
            "max_obs_norm_diff": max(float((g[n_params:] - state[n_params:]).abs().max()) for g in gathered),
            "param_change": float((state[:n_params] - initial).abs().max()),
            "obs_norm_count": float(learner.policy.obs_norm.count),
            "checkpoints": sorted(p.name for p in args.checkpoint_dir.iterdir()),
        }
        args.out.write_text(json.dumps(report))
    if world_size() > 1:
        # No rank closes its connections while a peer may still be finishing the all-gather.
        dist.barrier()


if __name__ == "__main__":
    main()
