"""The pipeline's one configuration tree: frozen typed dataclasses, TOML loading, CLI overrides.

What a user writes (``--config FILE.toml``, then ``--set section.field=value``, then the named
command-line flags, later ones winning) is plain data: a nested dict. :func:`resolve` turns it
into a :class:`PipelineConfig` in one place: every value the user left out that depends on the
device (sizes, the PPO network and schedule, compiling) or on other values (ring slots, PPO
updates) is chosen there, so the typed tree holds no "not chosen yet" value, and the
``config.toml`` a run writes holds every value it used: ``--config RUN/config.toml`` trains the
same network with the same hyper-parameters on any device. Every bad name or value raises
:class:`ConfigError` naming it; ``pipeline.launch`` turns that into exit code 2.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
import statistics
from dataclasses import dataclass, field
from typing import Any

import torch

from core.coerce import coerce
from learner.ppo_config import PPOConfig
from pipeline.envs.choice import EnvFactory, check_env_spec, default_workers, measure_step_seconds
from sim.config import SimConfig


class ConfigError(ValueError):
    """A bad configuration name or value; the message names it."""


CUDA_STREAMS_PER_POOL = 32
"""Streams in PyTorch's per-device pool of each priority (``torch.cuda.Stream()`` takes the
next one, round robin)."""
RING_PLACEMENTS = ("auto", "device", "pinned", "shared")
ACTOR_PROCESSES = ("auto", "on", "off")
DISPLAYS = ("auto", "rich", "plain", "none")


@dataclass(frozen=True)
class RunConfig:
    """Where and how long the run goes."""

    device: str = "auto"
    """``auto`` (CUDA when present, else CPU), ``cpu``, ``cuda`` or ``cuda:N``."""
    seed: int = 0
    """Seeds the sim scenarios, the policy initialisation and action sampling (0 ≤ seed < 2³²)."""
    total_steps: int = 4_000_000
    """Agent-steps (decisions of the learning fighter) to train for; by device when left out
    (4M on a CPU: about a minute and a half on 2 cores; 2G on CUDA)."""
    run_dir: str = ""
    """Run directory (config, checkpoints, log); empty: ``runs/<UTC timestamp>``."""
    resume: str = ""
    """Checkpoint file or run directory to resume from; empty: start fresh."""
    sync: bool = False
    """Run actors and learner in turn without overlap (the baseline)."""
    display: str = "auto"
    """Live display: ``auto`` (rich on a terminal, plain lines otherwise), ``rich``, ``plain``,
    ``none``."""
    log_interval_s: float = 2.0
    """Seconds between progress lines / display refreshes and log entries."""
    checkpoint_interval_s: float = 60.0
    """Seconds between periodic checkpoints (one is always written at the end)."""
    keep_checkpoints: int = 3
    """How many numbered checkpoints to keep besides ``latest.pt``."""
    eval_episodes: int = 64
    """Episodes per scripted opponent in the end-of-run evaluation; 0 skips it."""
    eval_replays: int = 2
    """Replays per scripted opponent the end-of-run evaluation records into ``RUN/replays``
    (half with the policy as red, half as blue; ``python -m pipeline.replay FILE``); 0: none."""
    tensorboard: bool = False
    """Also write TensorBoard event files into ``RUN/tensorboard`` (the ``tensorboard`` extra);
    ``RUN/progress.csv`` is written either way."""
    actor_threads: int = 1
    """Worker threads running actor chunks in async mode; when left out, on a CPU one per core
    left after the learner's (CPU-bound threads beyond the cores only fight over the GIL), on
    CUDA one per actor (threads there only enqueue work)."""
    metrics_addr: str = "127.0.0.1"
    """Address the Prometheus exporter listens on (``0.0.0.0`` lets another host scrape)."""
    metrics_port: int = 9400
    """Prometheus exporter port (-1: off; 0: any free port). A busy port falls back to the next
    free one of the following 32, and the run says which it took. Under ``torchrun`` each rank
    exports on ``port + LOCAL_RANK`` with a ``rank`` label."""
    profile: int = 0
    """Record this many learner iterations (after one warm-up) with ``torch.profiler`` into
    ``trace.json`` in the run directory, with the overlap report beside it; 0: off."""
    max_actor_failures: int = 3
    """Actor crashes tolerated in total before the run stops with an error."""
    debug: bool = False
    """Fill ring slots with a magic value and check every chunk wrote every field."""
    cuda_graph: bool = True
    """Capture the rollout step as a CUDA graph (CUDA only)."""
    compile_sim: bool = False
    """Compile the sim's torch path with ``torch.compile``; when left out, on CUDA only (the
    CPU steps the sim in its native kernel)."""
    compile_step: bool = False
    """Compile each sim actor's whole decision step (policy, opponent, reward, statistics
    around the sim's native op) as one function with ``torch.compile`` (CPU; see
    ``actors.compiled_step``): the same actions and observations, a fraction of the dispatches.
    When left out: on where ``compile_agents`` is (CPU runs of 1M agent-steps or more); CUDA
    captures the step as a graph instead."""
    compile_agents: bool = False
    """Compile the scripted opponents' decisions with ``torch.compile`` (the same actions; a
    chain of small ops becomes one kernel, 25x faster for crank on one CPU core, after about 8 s
    of compiling per agent kind and process, cached on disk afterwards). When left out: on for
    CPU runs of 1M agent-steps or more, where it pays for itself; off on CUDA (the captured
    graph already replays the opponent)."""


@dataclass(frozen=True)
class ActorsConfig:
    """The experience producers."""

    count: int = 4
    """Number of actors (each owns its own batch of environments)."""
    env: str = "midrange"
    """What the actors run: ``midrange`` (the batched air-combat sim), ``gym:ID`` (a registered
    Gymnasium env, e.g. ``gym:CartPole-v1``) or ``package.module:factory``."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of a Gymnasium env (``gym.make`` or the factory)."""
    workers_per_actor: int = 0
    """Worker processes per actor for a Gymnasium env (its envs split between them); 0 steps
    them in the actor's own process. When left out, chosen by the env's measured step cost and
    the core count (``pipeline.envs.choice.default_workers``)."""
    envs_per_actor: int = 64
    """Environments per actor; by device and env when left out (the sim: 64 on a CPU, 8192 on
    CUDA; a Gymnasium env: 4)."""
    rollout_len: int = 16
    """Decision steps per chunk (T); by device and env when left out (the sim: 16 on a CPU, 32
    on CUDA; a Gymnasium env: 32)."""
    opponent: str = "league"
    """Opponent spec for ``pipeline.config.specs.make_agent`` (scripted name, checkpoint or
    module:Class), or ``league``: a self-play league of past selves and scripted anchors
    (``[league]``). The default: against ``crank`` alone the fighter specialises (in one run
    90.7 % against crank, 44.3 % against random); the league's worst opponent is better in
    every seed measured (bench/RESULTS.md, "The default recipe")."""
    reward: str = "shaped"
    """Reward spec for ``rewards.make_reward``."""
    learning_side: int = 0
    """Which fighter learns: 0 red, 1 blue (the opponent flies the other)."""
    processes: str = "auto"
    """Sim actors in worker processes of their own (``on``) or as threads of the learner's
    process (``off``). On a CPU host the processes do not share the learner's GIL
    (``pipeline.run.actor_process``); on CUDA the actors and the learner of a device stay in one
    process (streams overlap only there), and Gymnasium actors stay threads (their envs
    already step in worker processes). ``auto`` (kept as such in ``config.toml``, so the file
    moves between devices): processes for the sim's actors on a CPU in async mode, where they
    measure faster (``bench/RESULTS.md``); threads on CUDA, for Gymnasium envs, in ``--sync``
    (nothing overlaps; a process only adds its hand-over) and under ``--profile`` (the profiler
    traces one process). :attr:`PipelineConfig.actor_processes` is the decision."""


@dataclass(frozen=True)
class RingConfig:
    """The ring of preallocated rollout slots."""

    slots: int = 8
    """Number of slots; two per actor when left out."""
    placement: str = "auto"
    """``auto``, ``device``, ``pinned`` or ``shared`` (see ``pipeline.transport.ring``)."""


@dataclass(frozen=True)
class IntakeConfig:
    """How the learner takes chunks from the ring."""

    slots_per_batch: int = 2
    """Ring slots (chunks) concatenated into one PPO batch; min(actors, 2) when left out."""
    max_policy_lag: int = 4
    """Chunks produced by a policy more than this many versions old are dropped (counted)."""


LEAGUE = "league"
"""The ``actors.opponent`` that plays a self-play league (``[league]``, ``pipeline.league.matchmaking``)."""
SNAPSHOT_CLOCKS = ("learning", "updates")
"""What ``league.snapshot_every`` counts (see :class:`LeagueConfig`)."""


@dataclass(frozen=True)
class LeagueConfig:
    """The self-play league (used when ``actors.opponent = "league"``)."""

    anchors: list[str] = field(default_factory=lambda: ["crank", "shooter", "random"])
    """Fixed opponents always in the pool (any agent spec but ``league``)."""
    groups_per_actor: int = 4
    """Groups each actor's environments are split into, each facing one opponent (must divide
    ``actors.envs_per_actor``); when left out, the most of 1 to 4 that divides it."""
    hold_chunks: int = 32
    """Chunks a group keeps its opponent before drawing again. A new opponent restarts the
    group's episodes (the cut ones count for nobody), so a group should hold its opponent for
    several episodes: 32 chunks of 16 decisions are 256 s of sim time at the defaults, against
    episodes of 30–90 s (at most 300 s)."""
    snapshot_every: int = 200
    """Learning between two snapshots of the learner put into the pool, in updates on
    ``snapshot_clock`` (200 updates are about 400k agent-steps at the CPU defaults: a snapshot
    is a different fighter, not a copy)."""
    snapshot_clock: str = "updates"
    """How the learning between snapshots is counted. ``"updates"``: every update counts one.
    ``"learning"``: an update at learning rate ``r`` counts ``r / r0`` of one (``r0`` the
    starting rate), so as an annealed rate falls to zero snapshots come further apart and the
    pool holds no near copies of the end of the run (of 12,000 annealed updates, the last 200
    run at under 2 % of the starting rate and count as 2); the same as ``"updates"`` when the
    rate is constant. Measured in bench/RESULTS.md, "Snapshots spaced by learning": it makes
    the final policy the clear top of its pool, but has not yet kept every scripted opponent
    beaten in the same run, so it is not the default."""
    snapshot_until: float = 1.0
    """Fraction of the run's updates (``ppo.total_updates``) after which no snapshot is taken:
    the pool is frozen for the rest of the run, so the final policy has that stretch of
    learning on its newest past self instead of a near copy of itself in the pool. 1 keeps
    snapshotting to the end."""
    max_snapshots: int = 8
    """Snapshots kept (the oldest leave the pool and ``RUN/league/``)."""
    self_play: float = 0.2
    """Chance a draw picks a past self instead of an anchor (once a snapshot exists)."""
    latest: float = 0.0
    """Chance a draw, before anything else, picks the learner's latest self: the actor's own
    copy of the learning policy at the draw, held like any opponent for ``hold_chunks`` chunks
    and never frozen into the pool. An even opponent that keeps up with the learner while the
    pool's snapshots may lie behind it; its games are counted for nobody (not rated, not in
    ``midrange_league_games_total``)."""
    pfsp_power: float = 1.0
    """Prioritized fictitious self-play: weight ``(1 − p_win)^power`` for each opponent."""
    pfsp_floor: float = 0.05
    """Least weight of an opponent, so none starves."""
    window_games: int = 500
    """Games against one opponent that its recent score and rating mostly rest on."""


@dataclass(frozen=True)
class PipelineConfig:
    """The whole tree, every value chosen (build it with :func:`resolve`)."""

    run: RunConfig = field(default_factory=RunConfig)
    actors: ActorsConfig = field(default_factory=ActorsConfig)
    ring: RingConfig = field(default_factory=RingConfig)
    intake: IntakeConfig = field(default_factory=IntakeConfig)
    league: LeagueConfig = field(default_factory=LeagueConfig)
    sim: SimConfig = field(default_factory=SimConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    """The learner's hyper-parameters (``learner.PPOConfig``); ``total_updates`` and ``seed``
    are derived from ``run.total_steps`` and ``run.seed``."""

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (TOML-able) of every value the user can set."""
        out: dict[str, Any] = {name: dataclasses.asdict(getattr(self, name)) for name in SECTIONS}
        out["sim"] = self.sim.to_dict()
        out["ppo"] = {k: v for k, v in self.ppo.to_dict().items() if k not in PPO_DERIVED}
        if self.actors.env != "midrange":  # a Gymnasium env: the sim's options mean nothing
            for key in SIM_ONLY:
                section, name = key.split(".")
                del out[section][name]
            out["sim"] = {}
        return out

    @property
    def samples_per_chunk(self) -> int:
        """Agent-steps in one ring slot (rollout_len × envs_per_actor)."""
        return self.actors.rollout_len * self.actors.envs_per_actor

    @property
    def actor_processes(self) -> bool:
        """Whether the actors run in processes of their own (``actors.processes`` decided)."""
        if self.actors.processes != "auto":
            return self.actors.processes == "on"
        return (self.actors.env == "midrange" and not _device_is_cuda(self.run.device) and not self.run.sync
                and self.run.profile == 0 and self.ring.placement in ("auto", "shared"))

    @property
    def samples_per_batch(self) -> int:
        """Agent-steps in one PPO batch (samples_per_chunk × slots_per_batch)."""
        return self.samples_per_chunk * self.intake.slots_per_batch


SECTIONS: dict[str, type] = {
    "run": RunConfig,
    "actors": ActorsConfig,
    "ring": RingConfig,
    "intake": IntakeConfig,
    "league": LeagueConfig,
}
PPO_DERIVED = ("total_updates", "seed")
"""``[ppo]`` fields a run derives (from ``run.total_steps`` and ``run.seed``), never set."""


def pick_device(requested: str) -> str:
    """``auto`` → ``cuda:0`` when present else ``cpu``; a CUDA device must exist and is indexed."""
    if requested == "auto":
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if requested.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(f"run.device is {requested!r} but no CUDA device is available")
        index = int(requested[5:]) if ":" in requested else torch.cuda.current_device()
        if index >= torch.cuda.device_count():
            raise ConfigError(
                f"run.device is {requested!r} but only {torch.cuda.device_count()} CUDA device(s) exist"
            )
        return f"cuda:{index}"
    return requested


def _device_is_cuda(device: str) -> bool:
    return device.startswith("cuda")


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _table(data: dict[str, Any], name: str) -> dict[str, Any]:
    table = data.get(name, {})
    if not isinstance(table, dict):
        raise ConfigError(f"[{name}] must be a table, got {table!r}")
    return dict(table)


SIM_ONLY = ("actors.opponent", "actors.reward", "actors.learning_side")
"""Options that have no meaning for a Gymnasium env (its reward and opponent are its own)."""


def _check_gym_options(env: str, t: dict[str, dict[str, Any]], device: str) -> None:
    """Refuse, naming them, options a Gymnasium env cannot use (rather than ignore them)."""
    for key in SIM_ONLY:
        section, name = key.split(".")
        if name in t[section]:
            raise ConfigError(f"{key} does not apply to --env {env} (a Gymnasium env has its own "
                              "reward and no opponent)")
    if t["sim"]:
        raise ConfigError(f"[sim] options ({', '.join(sorted(t['sim']))}) do not apply to --env {env}")
    if _device_is_cuda(device) and "device" in t["run"] and t["run"]["device"] != "auto":
        raise ConfigError(f"--env {env}: Gymnasium actors and their learner run on the CPU; "
                          f"run.device {t['run']['device']!r} is not supported with them")


def _measured_workers(env: str, actors: dict[str, Any], count: int) -> int:
    """Worker processes per actor for a Gymnasium env left to its default: the env is made
    and stepped for a fifth of a second, and ``pipeline.envs.choice.default_workers`` decides by its
    step cost and the core count (the choice is written to ``config.toml``, so a resumed or
    repeated run keeps it)."""
    kwargs = actors.get("env_kwargs", {})
    envs = actors.get("envs_per_actor")
    if not isinstance(kwargs, dict) or not isinstance(envs, int) or isinstance(envs, bool) or envs < 1:
        return 0  # the checks below name the bad value
    try:
        check_env_spec(env)
        step_s = measure_step_seconds(EnvFactory(env, kwargs))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return default_workers(step_s, envs, count, _cores())


def resolve(data: dict[str, Any], device: str | None = None) -> PipelineConfig:
    """The run's whole configuration from user data (parsed TOML plus overrides).

    ``device`` (a concrete torch device string, taken as given; default: ``run.device`` of
    ``data``, which must exist, ``auto`` picking CUDA when present) decides the values the user
    left out: CPU defaults are sized so
    ``python -m pipeline.launch --actors 4`` trains visibly within minutes on a 2-core laptop,
    GPU defaults to fill the device. Resolving a resolved config's ``to_dict()`` gives it back.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"config must be a table, got {type(data).__name__}")
    unknown = sorted(set(data) - set(SECTIONS) - {"sim", "ppo"})
    if unknown:
        raise ConfigError(f"unknown config section(s): {', '.join(unknown)}")
    t = {name: _table(data, name) for name in (*SECTIONS, "sim", "ppo")}
    if device is None:  # the user's device: it must exist
        requested = t["run"].get("device", RunConfig.device)
        if not isinstance(requested, str):
            raise ConfigError(f"run.device must be a string, got {requested!r}")
        device = pick_device(requested)
    env = t["actors"].get("env", ActorsConfig.env)
    if not isinstance(env, str):
        raise ConfigError(f"actors.env must be a string, got {env!r}")
    if env != "midrange":
        _check_gym_options(env, t, device)
        device = "cpu"
    cuda = _device_is_cuda(device)
    t["run"]["device"] = device
    count = t["actors"].get("count", ActorsConfig.count)
    if not isinstance(count, int) or isinstance(count, bool):
        raise ConfigError(f"actors.count must be an integer, got {count!r}")
    if env != "midrange":
        # CleanRL's PPO for classic control (4 envs × 128 steps, 4 epochs of 4 minibatches),
        # as 4 actors × 4 envs × 32 steps, 4 chunks a batch.
        for section, key, value in (("run", "total_steps", 500_000), ("actors", "envs_per_actor", 4),
                                    ("actors", "rollout_len", 32),
                                    ("intake", "slots_per_batch", min(count, 4))):
            t[section].setdefault(key, value)
        if "workers_per_actor" not in t["actors"]:
            t["actors"]["workers_per_actor"] = _measured_workers(env, t["actors"], count)
        gym_ppo: dict[str, Any] = {"hidden_sizes": [64, 64], "update_epochs": 4,
                                   "num_minibatches": 4, "learning_rate": 2.5e-4}
        for key, value in gym_ppo.items():
            t["ppo"].setdefault(key, value)
    for section, key, value in (
        ("run", "total_steps", 2_000_000_000 if cuda else 4_000_000),
        ("run", "compile_sim", cuda),
        ("run", "compile_agents", not cuda and env == "midrange"
         and t["run"].get("total_steps", 4_000_000) >= 1_000_000),
        ("run", "compile_step", not cuda and env == "midrange"
         and t["run"].get("total_steps", 4_000_000) >= 1_000_000),
        ("run", "actor_threads", count if cuda else max(1, min(count, _cores() - 1))),
        ("actors", "envs_per_actor", 8192 if cuda else 64),
        ("actors", "rollout_len", 32 if cuda else 16),
        ("ring", "slots", 2 * count),
        ("intake", "slots_per_batch", min(count, 2)),
    ):
        t[section].setdefault(key, value)
    envs = t["actors"]["envs_per_actor"]
    if isinstance(envs, int) and not isinstance(envs, bool) and envs >= 1:
        # Up to 4 groups, as many as divide the actor's environments evenly.
        t["league"].setdefault("groups_per_actor", max(g for g in range(1, 5) if envs % g == 0))
    if env == "midrange":
        # Fire is irreversible and scarce: a fresh policy that fires in half of its decisions
        # empties its missiles at the first sight of the enemy, and learns to build on that
        # opening; one that rarely fires meets shots taken at every range and every moment
        # (bench/RESULTS.md, "Fire discipline").
        t["ppo"].setdefault("policy_bias", _sim_policy_bias(t["sim"]))
        # The sim's observation carries the time left, so its time limit is part of the state
        # and a fight that reaches it ends there, a draw: bootstrapping at the limit instead
        # kept values of +0.5 to +1 in fights about to be drawn, and the fighter learned no
        # urgency (bench/RESULTS.md, "Fire discipline and the time limit"). The env still
        # reports truncation; this only chooses what the learner makes of it.
        t["ppo"].setdefault("bootstrap_truncated", False)
        if not cuda:
            t["ppo"].setdefault("entropy_coef", 0.003)
    if not cuda:
        # Small, quick updates on a laptop CPU: the sample budget is what limits learning there.
        cpu_ppo: dict[str, Any] = {"hidden_sizes": [64, 64], "update_epochs": 3,
                                   "num_minibatches": 2, "learning_rate": 1e-3}
        for key, value in cpu_ppo.items():
            t["ppo"].setdefault(key, value)
    parts: dict[str, Any] = {
        name: coerce(cls, t[name], where=name, unknown="unknown option(s) in [{where}]: {names}",
                     error=ConfigError)
        for name, cls in SECTIONS.items()
    }
    try:
        parts["sim"] = SimConfig.from_dict(t["sim"])
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"sim: {exc}") from None
    derived = sorted(set(t["ppo"]) & set(PPO_DERIVED))
    if derived:
        raise ConfigError(f"ppo.{derived[0]} is derived (ppo.total_updates from run.total_steps, "
                          "ppo.seed from run.seed); set those instead")
    validate(PipelineConfig(**parts))  # every section but [ppo], which depends on them
    config = PipelineConfig(**parts)
    t["ppo"]["total_updates"] = max(-(-config.run.total_steps // config.samples_per_batch), 1)
    t["ppo"]["seed"] = config.run.seed
    try:
        ppo = PPOConfig.from_dict(t["ppo"])
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"ppo: {exc}") from None
    if config.samples_per_batch % ppo.num_minibatches:
        raise ConfigError(
            f"ppo.num_minibatches ({ppo.num_minibatches}) must divide the batch of "
            f"{config.samples_per_batch} samples (rollout_len × envs_per_actor × slots_per_batch)"
        )
    return dataclasses.replace(config, ppo=ppo)


SIM_FIRE_LOGIT = -4.0
"""The initial bias of a fresh sim policy's fire logit (``ppo.policy_bias``): it fires in
about 1.8 % of its decisions, not in half of them."""


def _sim_policy_bias(sim: dict[str, Any]) -> list[float]:
    """The policy head's initial biases for the sim's action interface: every component
    uniform but fire, taken with probability σ(:data:`SIM_FIRE_LOGIT`) (continuous actions:
    the fire mean that gives the same probability of exceeding 0.5 with σ = 1)."""
    if sim.get("action_mode", SimConfig.action_mode) == "continuous":
        p_fire = 1.0 / (1.0 + math.exp(-SIM_FIRE_LOGIT))
        return [0.0, 0.0, round(0.5 - statistics.NormalDist().inv_cdf(1.0 - p_fire), 3)]
    return [0.0] * 7 + [SIM_FIRE_LOGIT]


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
        if _device_is_cuda(dev):
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
    if _device_is_cuda(run.device) and actors.count > CUDA_STREAMS_PER_POOL:
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
