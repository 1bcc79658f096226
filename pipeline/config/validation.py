"""Range checks of a built :class:`PipelineConfig` across its sections, the league's included."""

from __future__ import annotations

import importlib.util

from pipeline.config.devices import CUDA_STREAMS_PER_POOL, device_is_cuda
from pipeline.config.errors import ConfigError
from pipeline.config.sections import (
    ACTOR_PROCESSES,
    DISPLAYS,
    LEAGUE,
    RING_PLACEMENTS,
    SNAPSHOT_CLOCKS,
    PipelineConfig,
)
from pipeline.envs.choice import check_env_spec


def validate(config: PipelineConfig) -> None:
    """Range checks across the [run], [actors], [ring] and [intake] sections ([sim] and [ppo]
    check themselves); raises ConfigError naming the field."""
    run, actors, ring, intake = config.run, config.actors, config.ring, config.intake
    dev = run.device
    if not (dev in ("auto", "cpu", "cuda") or (dev.startswith("cuda:") and dev[5:].isdigit())):
        raise ConfigError(f"run.device must be auto, cpu, cuda or cuda:N, got {dev!r}")
    if run.total_steps < 1:
        raise ConfigError(f"run.total_steps must be >= 1, got {run.total_steps}")
    if not 0 <= run.seed < 2**32:
        raise ConfigError(f"run.seed must be in [0, 2**32), got {run.seed}")
    if run.display not in DISPLAYS:
        raise ConfigError(f"run.display must be one of {', '.join(DISPLAYS)}, got {run.display!r}")
    for name in ("log_interval_s", "checkpoint_interval_s"):
        if getattr(run, name) <= 0:
            raise ConfigError(f"run.{name} must be > 0, got {getattr(run, name)}")
    if not isinstance(run.metrics_addr, str) or not run.metrics_addr.strip():
        raise ConfigError(f"run.metrics_addr must be a host address, got {run.metrics_addr!r}")
    if run.profile < 0:
        raise ConfigError(f"run.profile must be >= 0 learner iterations, got {run.profile}")
    if not -1 <= run.metrics_port <= 65535:
        raise ConfigError(f"run.metrics_port must be -1 (off) or a port 0..65535, got {run.metrics_port}")
    if run.actor_threads < 1:
        raise ConfigError(f"run.actor_threads must be >= 1, got {run.actor_threads}")
    for name in ("keep_checkpoints", "max_actor_failures"):
        if getattr(run, name) < 1:
            raise ConfigError(f"run.{name} must be >= 1, got {getattr(run, name)}")
    if run.eval_episodes < 0:
        raise ConfigError(f"run.eval_episodes must be >= 0, got {run.eval_episodes}")
    if run.eval_replays < 0:
        raise ConfigError(f"run.eval_replays must be >= 0, got {run.eval_replays}")
    if run.tensorboard and importlib.util.find_spec("tensorboard") is None:
        raise ConfigError("run.tensorboard needs the tensorboard package: pip install 'midrange-rl[tensorboard]'")
    if actors.count < 1:
        raise ConfigError(f"actors.count must be >= 1, got {actors.count}")
    for name in ("envs_per_actor", "rollout_len"):
        value = getattr(actors, name)
        if value < 1:
            raise ConfigError(f"actors.{name} must be >= 1, got {value}")
    if actors.workers_per_actor < 0:
        raise ConfigError(f"actors.workers_per_actor must be >= 0, got {actors.workers_per_actor}")
    if actors.workers_per_actor > actors.envs_per_actor:
        raise ConfigError(f"actors.workers_per_actor ({actors.workers_per_actor}) must be <= "
                          f"actors.envs_per_actor ({actors.envs_per_actor})")
    try:
        check_env_spec(actors.env)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if actors.learning_side not in (0, 1):
        raise ConfigError(f"actors.learning_side must be 0 or 1, got {actors.learning_side}")
    for name in ("opponent", "reward"):
        if not getattr(actors, name).strip():
            raise ConfigError(f"actors.{name} must not be empty")
    if actors.processes not in ACTOR_PROCESSES:
        raise ConfigError(f"actors.processes must be one of {', '.join(ACTOR_PROCESSES)}, "
                          f"got {actors.processes!r}")
    if actors.processes == "on":
        if actors.env != "midrange":
            raise ConfigError(f"actors.processes = on is for the sim; --env {actors.env} actors stay "
                              "threads (their envs already step in worker processes)")
        if device_is_cuda(dev):
            raise ConfigError("actors.processes = on needs run.device cpu: on CUDA the actors and the "
                              "learner of a device share one process, where their streams overlap")
        if ring.placement not in ("auto", "shared"):
            raise ConfigError(f"actors.processes = on writes a shared-memory ring; ring.placement "
                              f"{ring.placement!r} cannot cross processes (use auto or shared)")
    if ring.placement not in RING_PLACEMENTS:
        raise ConfigError(
            f"ring.placement must be one of {', '.join(RING_PLACEMENTS)}, got {ring.placement!r}"
        )
    if ring.slots < 1:
        raise ConfigError(f"ring.slots must be >= 1, got {ring.slots}")
    if intake.slots_per_batch < 1:
        raise ConfigError(f"intake.slots_per_batch must be >= 1, got {intake.slots_per_batch}")
    if intake.max_policy_lag < 0:
        raise ConfigError(f"intake.max_policy_lag must be >= 0, got {intake.max_policy_lag}")
    if intake.slots_per_batch > ring.slots:
        raise ConfigError(
            f"intake.slots_per_batch ({intake.slots_per_batch}) must be <= ring.slots "
            f"({ring.slots}), or the learner could never fill a batch"
        )
    _validate_league(config)
    if device_is_cuda(run.device) and actors.count > CUDA_STREAMS_PER_POOL:
        raise ConfigError(
            f"actors.count is {actors.count}, but on CUDA at most {CUDA_STREAMS_PER_POOL} actors run "
            "in one process: each needs a stream of its own, and PyTorch's pool has "
            f"{CUDA_STREAMS_PER_POOL} per device (more actors would share streams and serialize)"
        )


def _validate_league(config: PipelineConfig) -> None:
    league = config.league
    for name in ("groups_per_actor", "hold_chunks", "snapshot_every", "max_snapshots", "window_games"):
        if getattr(league, name) < 1:
            raise ConfigError(f"league.{name} must be >= 1, got {getattr(league, name)}")
    if league.snapshot_clock not in SNAPSHOT_CLOCKS:
        raise ConfigError(f"league.snapshot_clock must be one of {', '.join(SNAPSHOT_CLOCKS)}, "
                          f"got {league.snapshot_clock!r}")
    for name in ("self_play", "latest"):
        if not 0.0 <= getattr(league, name) <= 1.0:
            raise ConfigError(f"league.{name} must be in [0, 1], got {getattr(league, name)}")
    if not 0.0 < league.snapshot_until <= 1.0:
        raise ConfigError(f"league.snapshot_until must be in (0, 1], got {league.snapshot_until}")
    if league.pfsp_power < 0:
        raise ConfigError(f"league.pfsp_power must be >= 0, got {league.pfsp_power}")
    if not 0.0 < league.pfsp_floor <= 1.0:
        raise ConfigError(f"league.pfsp_floor must be in (0, 1], got {league.pfsp_floor}")
    for anchor in league.anchors:
        if not anchor.strip() or anchor.strip() == LEAGUE:
            raise ConfigError(f"league.anchors: {anchor!r} is not an opponent")
    if len(set(league.anchors)) != len(league.anchors):
        raise ConfigError(f"league.anchors names an opponent twice: {league.anchors}")
    if config.actors.opponent != LEAGUE:
        return
    if not league.anchors:
        raise ConfigError("league.anchors is empty: the league would have no opponent before its "
                          "first snapshot (name at least one, e.g. crank)")
    if config.actors.envs_per_actor % league.groups_per_actor:
        raise ConfigError(f"league.groups_per_actor ({league.groups_per_actor}) must divide "
                          f"actors.envs_per_actor ({config.actors.envs_per_actor})")
