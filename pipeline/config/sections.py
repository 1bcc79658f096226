"""The configuration tree: one frozen dataclass per section ([run], [actors], [ring], [intake],
[league]) and :class:`PipelineConfig`, which holds them with ``sim.SimConfig`` and
``learner.PPOConfig``; every value chosen (:func:`pipeline.config.resolution.resolve` builds it)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from core.bounds import Bounds, count, positive
from learner.ppo_config import PPOConfig
from pipeline.config.devices import device_is_cuda
from sim.config import SimConfig

RING_PLACEMENTS = ("auto", "device", "pinned", "shared")
ACTOR_PROCESSES = ("auto", "on", "off")
ACTOR_SCHEDS = ("auto", "normal", "idle")
DISPLAYS = ("auto", "rich", "plain", "none")


@dataclass(frozen=True)
class RunConfig:
    """Where and how long the run goes."""

    device: str = "auto"
    """``auto`` (CUDA when present, else CPU), ``cpu``, ``cuda`` or ``cuda:N``."""
    seed: int = 0
    """Seeds the sim scenarios, the policy initialisation and action sampling (0 ≤ seed < 2³²)."""
    total_steps: int = 7_000_000
    """Agent-steps (decisions of the learning fighter) to train for; by device when left out
    (7M on a CPU: about 4 minutes on 2 cores; 2G on CUDA)."""
    stop_steps: int = 0
    """Stop once this many agent-steps are trained in all (a resumed run's earlier ones
    included), with the final checkpoint and league written as at the end, but counting the
    learning-rate schedule and the league's snapshot window (``league.snapshot_until``) to
    ``total_steps`` still: ``--resume RUN`` then continues the same run where it stopped, with
    ``run.stop_steps`` raised or 0 (off, the default). A run stopped this way is not evaluated
    at its end. Staged training uses it: ``bench/learn_league.py --exploiter-rounds`` trains
    exploiters of the policy between the stages."""

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

    @property
    def stop_at(self) -> int:
        """The agent-steps this part of the run trains to: ``stop_steps`` when set, else
        ``total_steps``."""
        return self.stop_steps or self.total_steps


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
    them in the actor's own process. When left out, 0 for Gymnasium's own envs and the cores
    shared between the actors for any other (``pipeline.envs.choice.default_workers``)."""
    envs_per_actor: int = 64
    """Environments per actor; by device and env when left out (the sim: 64 on a CPU, 8192 on
    CUDA; a Gymnasium env: 4)."""
    rollout_len: int = 16
    """Decision steps per chunk (T); by device and env when left out (the sim: 16 on a CPU, 32
    on CUDA; a Gymnasium env: 32)."""
    opponent: str = "league"
    """Opponent spec for ``pipeline.config.specs.build_agent`` (scripted name, checkpoint or
    module:Class), or ``league``: a self-play league of past selves and scripted anchors
    (``[league]``). The default: against ``crank`` alone the fighter specialises (in one run
    90.7 % against crank, 44.3 % against random); the league's worst opponent is better in
    every seed measured (bench/RESULTS.md, "The default recipe")."""
    reward: str = "shaped+0.75*hunt"
    """Reward spec for ``rewards.make_reward``. The default adds to ``shaped`` three quarters
    of ``hunt``, the range closed on an enemy that has spent its missiles (a potential's
    change: a draw left at a distance from a disarmed enemy costs that distance). Measured with
    the endgame curriculum (``sim.spawn_partial_ammo``) over three seeds each: at weight 0.5
    (γ 0.99) the worst seed won 86.8 % against ``random``, at 1 one seed fell to 64.5 % against
    ``crank``; at 0.75 with γ 0.993 and 7M agent-steps the worst seed wins 97.2 % against
    ``random`` and 83.5 % against ``crank`` (bench/RESULTS.md, "A longer look ahead and a
    stronger hunt")."""
    learning_side: int = 0
    """Which fighter learns: 0 red, 1 blue (the opponent flies the other)."""
    nice: int = -1
    """How far below the learner's the actor processes' CPU scheduling priority is (an
    ``os.nice`` increment, 0 to 19; actor processes only, set once the actor is built). The
    CPU counterpart of the learner's high-priority CUDA stream: on a shared core the learner's
    update and its collectives run the moment they can, and the actors take the rest. -1 (the
    default): 19 for the actor processes of a ``torchrun`` job of more than one rank on CPU,
    where a learner descheduled by its own actor holds up every rank's gradient all-reduce
    (bench/RESULTS.md, "One rank against two torchrun ranks"); 0 otherwise."""
    sched: str = "auto"
    """The actor processes' Linux scheduling class: ``normal`` (the learner's, lowered by
    ``nice``) or ``idle`` (``SCHED_IDLE``: an actor runs only on cycles no other task of the
    core wants, and a waking learner, or the gloo thread carrying its all-reduce, takes the
    core back at once instead of after the actor's time slice). ``auto`` (the default):
    ``idle`` for the actor processes of a ``torchrun`` job of more than one rank on a Linux CPU
    host, where one rank's late collective holds up every rank (a 2-rank job on 2 cores did
    7.5 % more agent-steps/s than at nice 19: bench/RESULTS.md, "The actors in the idle
    class"); ``normal`` otherwise (one process on its own cores gains nothing: the work is the
    same, only its order changes)."""
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
    """``auto``, ``device``, ``pinned`` or ``shared`` (see ``pipeline.transport.slots``)."""


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
    self_play_from: float = 0.0
    """Fraction of the run's updates (``ppo.total_updates``) before which no past self is
    drawn: until then every draw (but ``latest``) is an anchor, from then on ``self_play``
    applies. With ``snapshot_until`` at or before it, the final stretch meets the pool's frozen
    snapshots, the learner's own kind, after a run spent on the anchors; 0 draws past selves
    as soon as one exists."""
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
    pfsp_draw: float = 0.5
    """What a draw counts for in ``p_win``: 0.5 half a win; 0 no win at all, so an opponent
    the learner only draws with (one that runs and never commits) is drawn as often as one it
    loses to."""
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
        return (self.actors.env == "midrange" and not device_is_cuda(self.run.device) and not self.run.sync
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




SECTION_BOUNDS: dict[str, dict[str, Bounds]] = {
    "run": {
        "seed": count(0, 2**32 - 1),
        "total_steps": count(1, 10**15),
        "stop_steps": count(0, 10**15),
        "log_interval_s": positive(86_400.0),
        "checkpoint_interval_s": positive(1e7),
        "keep_checkpoints": count(1, 10_000),
        "eval_episodes": count(0, 1_000_000),
        "eval_replays": count(0, 1000),
        "actor_threads": count(1, 1024),
        "metrics_port": count(-1, 65_535),
        "profile": count(0, 10_000),
        "max_actor_failures": count(1, 1_000_000),
    },
    "actors": {
        "count": count(1, 1024),
        "workers_per_actor": count(0, 1024),
        "envs_per_actor": count(1, 2**30),
        "rollout_len": count(1, 65_536),
        "learning_side": count(0, 1),
        "nice": count(-1, 19),
    },
    "ring": {"slots": count(1, 65_536)},
    "intake": {"slots_per_batch": count(1, 65_536), "max_policy_lag": count(0, 10**9)},
    "league": {
        "groups_per_actor": count(1, 2**30),
        "hold_chunks": count(1, 10**9),
        "snapshot_every": count(1, 10**9),
        "snapshot_until": positive(1.0),
        "max_snapshots": count(1, 10_000),
        "self_play": Bounds(0.0, 1.0),
        "self_play_from": Bounds(0.0, 1.0),
        "latest": Bounds(0.0, 1.0),
        "pfsp_power": Bounds(0.0, 100.0),
        "pfsp_floor": positive(1.0),
        "pfsp_draw": Bounds(0.0, 1.0),
        "window_games": count(1, 10**9),
    },
}
"""The range of each number of the pipeline's sections, by section and field (``[sim]`` and
``[ppo]`` declare theirs in ``sim.config.SIM_BOUNDS`` and ``learner.ppo_config.PPO_BOUNDS``).
The counts are bounded by what one run can do: a thousand actors, a million evaluation
episodes; the environments (2**30 an actor) are bounded only to keep every product of sizes
finite, the memory check before a run refuses far fewer."""


SIM_ONLY = ("actors.opponent", "actors.reward", "actors.learning_side")
"""Options that have no meaning for a Gymnasium env (its reward and opponent are its own)."""
