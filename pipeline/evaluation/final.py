"""The evaluation at the end of a run (``pipeline.launch``): the final checkpoint against the
scripted opponents, or its mean return on a Gymnasium env."""

from __future__ import annotations

from pathlib import Path

import torch

from pipeline.config import PipelineConfig
from pipeline.envs.choice import EnvFactory, is_sim
from pipeline.evaluation.gym import evaluate_returns


def evaluate_final(checkpoint: Path, config: PipelineConfig, run_dir: Path | None = None) -> str:
    """Play the checkpoint against the scripted opponents (``pipeline.evaluate``), as a table,
    recording ``run.eval_replays`` replays per opponent into ``run_dir/replays``; on a
    Gymnasium env, its mean return over ``run.eval_episodes`` episodes."""
    if not is_sim(config.actors.env):
        factory = EnvFactory(config.actors.env, dict(config.actors.env_kwargs))
        return evaluate_returns(checkpoint, factory, config.run.eval_episodes, seed=config.run.seed + 1,
                                workers=config.actors.workers_per_actor).line()
    from pipeline.evaluation.matches import play_match
    from pipeline.evaluation.recording import MatchRecorder
    from pipeline.evaluation.tables import format_table

    replays = run_dir / "replays" if run_dir is not None and config.run.eval_replays > 0 else None
    if replays is not None:
        replays.mkdir(exist_ok=True)
    stats = []
    with torch.no_grad():
        for opp in ("straight", "pursuit", "shooter", "crank", "random"):
            recording = (MatchRecorder(replays, str(checkpoint), opp, config.run.eval_replays, agent_label="policy")
                         if replays is not None else None)
            stats.append(play_match(str(checkpoint), opp, config.run.eval_episodes, config.sim.rules_start(),
                                    seed=config.run.seed + 1, device=config.run.device,
                                    batch=max(config.run.eval_episodes // 2, 1), recording=recording))
    table = format_table(stats, config.sim.decision_dt_s)
    if replays is not None:
        table += f"\nreplays: {replays} (python -m pipeline.replay FILE --png OUT)"
    return table
