"""One training job in several processes under ``torchrun``: the ranks, their shares of the job
and what they agree on.

Every rank runs the whole pipeline (its own actors, ring and a learner replica whose gradients
are averaged over the ranks, :mod:`learner.distributed`). A :class:`Job` read from ``torchrun``'s
environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``) opens the process group (gloo on the
CPU, NCCL on CUDA, one process per GPU) with a timeout on every collective, and then:

- checks that every rank was started with the same config (:meth:`Job.agree_on_start`), and
  hands every rank rank 0's run directory (the time-stamped default is rank 0's clock);
- claims the run directory on rank 0 alone; another rank writes nothing there but its log
  (``run.rank<N>.log``), and fails the same way when rank 0 cannot claim it
  (:meth:`Job.claim_run_dir`);
- splits the job's budget of chunks evenly over the ranks (:meth:`Job.share_of_chunks`) and
  gives each rank its own seeds (:func:`rank_seed`), so no two ranks collect the same data;
- keeps the learners in step: before each update every rank says how many samples its batch
  holds, and the update happens only when every rank has one (:meth:`Job.agree_to_update`, one
  small all-reduce), so a rank that stops (a signal, a failure) stops every other rank after
  the same number of updates and no rank waits in a collective the others never enter;
- exchanges the league's game results with every agreement (:mod:`pipeline.run.rank_league`),
  so the job has one league;
- gathers each rank's share for the summary (:meth:`Job.share_lines`).

A single process (no ``torchrun``, or ``WORLD_SIZE`` 1) is a job of one rank, for which every
method does nothing.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist

from core.command import squeezed
from learner.checkpoint.rng import seed_global_generators
from learner.distributed import init_from_env, shutdown
from pipeline.config import ConfigError, PipelineConfig
from pipeline.config.devices import device_is_cuda
from pipeline.league.matchmaking import League
from pipeline.run.progress import RunFailed
from pipeline.run.rank_league import LeagueResults
from pipeline.run.rundir import RunDir, claim_run_dir
from pipeline.transport.ring import RingStats

COLLECTIVE_TIMEOUT_S = 300.0
"""Seconds a rank waits in one collective (a peer that neither answers nor dies) before the
run fails with that message; a peer that dies is noticed at once (its connection closes).
The environment variable :data:`TIMEOUT_VARIABLE` sets another."""
TIMEOUT_VARIABLE = "MIDRANGE_COLLECTIVE_TIMEOUT_S"


JOB_ACTOR_NICE = 19
"""``actors.nice`` of a CPU job's ranks when left at -1: a rank's learner is never descheduled by
its own actor processes mid-update, so the other ranks' all-reduces do not wait for it."""


def env_int(environ: Mapping[str, str], name: str, default: int) -> int:
    text = environ.get(name, "")
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"the environment variable {name}={text!r} is not an integer "
                          "(torchrun sets it; start the job with torchrun)") from None


def rank_seed(seed: int, rank: int) -> int:
    """The seed rank ``rank`` uses for ``run.seed`` = ``seed``: ``seed`` itself on rank 0 (so a
    job of one rank is the single-process run), a far-away value on every other rank."""
    return seed if rank == 0 else (seed + rank * 2_654_435_761) % 2**32


@dataclass(frozen=True)
class RankShare:
    """What one rank did, gathered for the summary."""

    rank: int
    trained_samples: int
    produced_samples: int
    consumed_samples: int
    dropped_samples: int
    in_flight_samples: int
    updates: int
    weights_digest: str
    """SHA-256 of the learner's parameters (the replicas must all hold the same)."""
    league_games: int | None
    """Games this rank's actors played in the league (None without one)."""


@dataclass
class Job:
    """The ranks of one training job (see the module docstring)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    timeout_s: float = COLLECTIVE_TIMEOUT_S
    restarts: int = 0
    """Times ``torchrun`` restarted the job (``TORCHELASTIC_RESTART_COUNT``, ``--max-restarts``)."""
    trained_samples: int = 0
    """Samples every rank together trained on in this session."""
    agreed_samples: int = 0
    """Samples of the update the ranks last agreed on (:meth:`agree_to_update`), counted in
    :attr:`trained_samples` once this rank's update is done."""
    league_results: LeagueResults | None = None
    """The exchange of league games between the ranks (with a league)."""
    _phase: str = field(default="apart", init=False)
    """``apart`` until the ranks met (:meth:`agree_on_start`), ``met`` until they exchanged how
    their start went (:meth:`claim_run_dir`), then ``started``."""

    @property
    def distributed(self) -> bool:
        """Whether the job has more than one rank."""
        return self.world_size > 1

    @property
    def log_name(self) -> str:
        """This rank's log in the run directory: ``run.log`` on rank 0, ``run.rank<N>.log``."""
        return "run.log" if self.rank == 0 else f"run.rank{self.rank}.log"

    def close(self) -> None:
        """Close the process group (every rank, on every path)."""
        if self.distributed:
            shutdown()

    def __enter__(self) -> Job:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        """Close the group; a rank whose start failed first tells the others, which wait for
        it to claim the run directory (:meth:`claim_run_dir`), so they stop with its error."""
        try:
            if isinstance(exc, Exception) and self.distributed and self._phase == "met":
                text = str(exc) if isinstance(exc, ConfigError) else f"{type(exc).__name__}: {exc}"
                self._phase = "started"
                self._gather(" ".join(text.split()) or type(exc).__name__)
        except RunFailed:
            pass  # the others are gone already
        finally:
            self.close()

    # ------------------------------------------------------------------ the config
    def job_config(self, config: PipelineConfig) -> PipelineConfig:
        """``config`` for the whole job: ``ppo.total_updates`` counts the job's updates, each of
        which trains one batch of every rank; a budget of fewer chunks than ranks is refused
        (every rank trains the same whole number of chunks, the job's budget rounded up). A job ``torchrun`` restarted continues its
        ``--run-dir`` where its last checkpoint left it (as ``--resume RUN``)."""
        run_dir = Path(config.run.run_dir) if config.run.run_dir else None
        if self.restarts and run_dir is not None and not config.run.resume and (run_dir / "config.toml").is_file():
            config = dataclasses.replace(config, run=dataclasses.replace(config.run, resume=str(run_dir)))
        if not self.distributed:
            return config
        chunks = -(-config.run.total_steps // config.samples_per_chunk)
        if chunks < self.world_size and not config.run.resume:
            raise ConfigError(
                f"run.total_steps {config.run.total_steps:,} is {chunks} chunk(s) of {config.samples_per_chunk} "
                f"agent-steps, fewer than the job's {self.world_size} ranks (each rank trains whole chunks); "
                f"raise --total-steps to at least {self.world_size * config.samples_per_chunk:,} or start fewer ranks")
        per_update = config.samples_per_batch * self.world_size
        total_updates = max(-(-config.run.total_steps // per_update), 1)
        return dataclasses.replace(config, ppo=dataclasses.replace(config.ppo, total_updates=total_updates))

    def config_note(self) -> str:
        """The ``config.toml`` comment recording the job's ranks (empty for one rank)."""
        if not self.distributed:
            return ""
        return (f"# job: world size {self.world_size} (torchrun); each rank runs the actors above "
                "with seeds derived from run.seed and its rank, and a learner replica\n")

    def rank_config(self, config: PipelineConfig) -> PipelineConfig:
        """``config`` as this rank runs it: its own seeds, its own GPU (``cuda:LOCAL_RANK``), on a
        CPU its actor processes below its learner (``actors.nice`` -1 becomes :data:`JOB_ACTOR_NICE`,
        ``actors.sched`` auto the idle class on Linux);
        on every rank but 0 no display, no profile, no TensorBoard and no evaluation (rank 0
        shows and writes the job's)."""
        if not self.distributed:
            return config
        run = dataclasses.replace(config.run, seed=rank_seed(config.run.seed, self.rank))
        if device_is_cuda(run.device) and self.local_rank < torch.cuda.device_count():
            run = dataclasses.replace(run, device=f"cuda:{self.local_rank}")
        if self.rank:
            run = dataclasses.replace(run, display="none", profile=0, tensorboard=False, eval_episodes=0)
        ppo = dataclasses.replace(config.ppo, seed=rank_seed(config.ppo.seed, self.rank))
        actors = config.actors
        if actors.nice == -1 and not device_is_cuda(run.device):
            actors = dataclasses.replace(actors, nice=JOB_ACTOR_NICE)
        if actors.sched == "auto" and not device_is_cuda(run.device) and hasattr(os, "SCHED_IDLE"):
            actors = dataclasses.replace(actors, sched="idle")
        return dataclasses.replace(config, run=run, actors=actors, ppo=ppo)

    def describe(self, chunks: int, samples_per_chunk: int) -> str:
        """The job's layout and this rank's share of it, for the run's start."""
        return (f"job: {self.world_size} ranks ({dist.get_backend()}), each with the actors above and a "
                f"learner replica; rank {self.rank}'s share {chunks * samples_per_chunk:,} agent-steps "
                f"({chunks} chunks)")

    def after_resume(self, seed: int, agent_steps: int) -> None:
        """Rank 0 goes on with the random streams the checkpoint restored on every rank; each
        other rank draws its own again, from its seed and the job's agent-steps."""
        if self.rank:
            seed_global_generators((seed + agent_steps) % 2**32)

    def share_of_chunks(self, job_chunks: int) -> int:
        """This rank's chunks of a job budget of ``job_chunks`` (every rank the same share,
        rounded up, so every rank trains the same number of batches)."""
        return -(-job_chunks // self.world_size)

    # ------------------------------------------------------------------ agreements
    def _gather(self, value: object) -> list[object]:
        gathered: list[object] = [None] * self.world_size
        try:
            dist.all_gather_object(gathered, value)
        except RuntimeError as exc:
            raise RunFailed(self._lost(exc)) from exc
        return gathered

    def _lost(self, exc: BaseException) -> str:
        return (f"rank {self.rank}: another rank of the job stopped answering (collective timeout "
                f"{self.timeout_s:.0f} s): {squeezed(exc, 300)}")

    def agree_on_start(self, config_text: str, run_dir: Path) -> Path:
        """Check that every rank runs ``config_text``; return rank 0's ``run_dir``."""
        if not self.distributed:
            return run_dir
        gathered = self._gather((config_text, str(run_dir)))
        self._phase = "met"
        texts = [str(g[0]) for g in gathered if isinstance(g, tuple)]
        for other, text in enumerate(texts):
            if text != texts[0]:
                mine, theirs = texts[0].splitlines(), text.splitlines()
                differ = next((f"{a!r} against {b!r}" for a, b in zip(mine, theirs, strict=False) if a != b),
                              "a different number of lines")
                self._phase = "started"  # every rank raises this
                raise ConfigError(f"rank {other} was started with another config than rank 0 "
                                  f"({differ}); start every rank with the same options")
        first = gathered[0]
        assert isinstance(first, tuple)
        return Path(first[1])

    def claim_run_dir(self, path: Path, config_text: str, resuming_here: bool) -> RunDir:
        """Rank 0 claims ``path`` (:func:`pipeline.run.rundir.claim_run_dir`); every other rank
        gets a claim that owns nothing. If the claim failed, or another rank could not start
        (:meth:`__exit__`), every rank raises the error and rank 0 leaves no directory behind."""
        if not self.distributed:
            return claim_run_dir(path, config_text, resuming_here)
        owned: RunDir | None = None
        error = ""
        if self.rank == 0:
            try:
                owned = claim_run_dir(path, config_text, resuming_here)
            except ConfigError as exc:
                error = str(exc)
        errors = self._gather(error)
        self._phase = "started"
        failed = next(((r, str(e)) for r, e in enumerate(errors) if e), None)
        if owned is not None and failed is not None:
            owned.release(keep=False)
        if failed is not None:
            raise ConfigError(failed[1] if failed[0] == 0 else f"rank {failed[0]} could not start: {failed[1]}")
        if owned is not None:
            return owned
        try:  # a rank on another machine keeps its log in a directory of the same name there
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"run.run_dir {path}: rank {self.rank} cannot create it for its log: "
                              f"{exc.strerror or exc}") from None
        return RunDir(path, created=False, messages=[])

    def lockstep(self, league: League | None) -> Callable[[int], bool] | None:
        """The run's update agreement (:meth:`agree_to_update`; None for one rank), with
        ``league``'s games exchanged at every agreement."""
        if not self.distributed:
            return None
        if league is not None:
            self.league_results = LeagueResults(league, self.rank)
        return self.agree_to_update

    def agree_to_update(self, samples: int) -> bool:
        """Blocking, on the learner's thread: True when every rank holds a batch (``samples``
        > 0) for the next update; False when any rank has none (it stopped or is done), and
        then no rank updates again. Counts the job's trained samples."""
        if not self.distributed:
            return samples > 0
        league = self.league_results
        packed = league.pack() if league is not None else None  # the league's games ride along
        counts = torch.tensor([1 if samples > 0 else 0, samples, *(packed.vector if packed else [])],
                              dtype=torch.int64,
                              device=f"cuda:{self.local_rank}" if dist.get_backend() == "nccl" else "cpu")
        try:
            dist.all_reduce(counts)
        except RuntimeError as exc:
            raise RunFailed(self._lost(exc)) from exc
        summed = [int(v) for v in counts.tolist()]
        ready, total = summed[:2]
        if league is not None and packed is not None and not league.unpack(packed, summed[2:], self.world_size):
            league.exchange(lambda own: [g if isinstance(g, dict) else {} for g in self._gather(own)])
        if ready < self.world_size:
            return False
        self.agreed_samples = total
        return True

    def share_lines(self, trained: int, ring: RingStats, updates: int, policy: torch.nn.Module,
                    failed: bool) -> list[str]:
        """The summary's lines on the job: its sample accounting summed over the ranks, each
        rank's share, and whether the learner replicas ended identical. Collective, unless this
        rank's run ended on an error (``failed``: the other ranks may be anywhere)."""
        if not self.distributed:
            return []
        if failed:
            return [f"job: rank {self.rank} failed; the ranks' shares were not gathered"]
        params = torch.nn.utils.parameters_to_vector(policy.parameters()).detach().to("cpu", torch.float32)
        digest = hashlib.sha256(params.numpy().tobytes()).hexdigest()[:16]
        league = self.league_results
        mine = RankShare(self.rank, trained, ring.produced_samples, ring.consumed_samples,
                         ring.dropped_samples, ring.in_flight_samples, updates, digest,
                         league.own_games if league is not None else None)
        try:
            shares = [s for s in self._gather(mine) if isinstance(s, RankShare)]
        except RunFailed as exc:
            return [f"job: the ranks' shares were not gathered: {exc}"]
        job_trained = sum(s.trained_samples for s in shares)
        lines = [
            f"job of {self.world_size} ranks: {job_trained:,} agent-steps trained; samples: produced "
            f"{sum(s.produced_samples for s in shares)} = consumed {sum(s.consumed_samples for s in shares)}"
            f" + dropped {sum(s.dropped_samples for s in shares)} + in flight "
            f"{sum(s.in_flight_samples for s in shares)}"]
        for s in shares:
            lines.append(
                f"rank {s.rank}: {s.trained_samples:,} agent-steps trained "
                f"({s.trained_samples / max(job_trained, 1):.0%}), produced {s.produced_samples} = "
                f"consumed {s.consumed_samples} + dropped {s.dropped_samples} + in flight "
                f"{s.in_flight_samples}, {s.updates} updates, weights {s.weights_digest}")
        if league is not None:
            lines.append(f"league: {league.games():,} games in the records, every rank's ("
                         + ", ".join(f"rank {s.rank} {s.league_games or 0:,}" for s in shares)
                         + f"); exchanged in {league.packed} update agreements, by name in {league.by_name}")
        digests = {s.weights_digest for s in shares}
        lines.append("learner replicas: identical on every rank" if len(digests) == 1 else
                     f"learner replicas: DIFFER ({len(digests)} different weight sets)")
        return lines


def attempt_store(env: Mapping[str, str], restarts: int, timeout: datetime.timedelta) -> dist.Store | None:
    """The store the ranks of this attempt of the job meet in. ``torchrun``'s own store (its
    rendezvous store, kept across ``--max-restarts`` restarts) still holds the addresses of
    the previous attempt's ranks under the keys the process group reads, so each attempt uses
    keys of its own; None (torch's default) when the ranks have a store of their own."""
    if env.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    store = dist.TCPStore(env["MASTER_ADDR"], int(env["MASTER_PORT"]), is_master=False, timeout=timeout)
    return dist.PrefixStore(f"midrange/attempt_{restarts}", store)


def collective_timeout_s(env: Mapping[str, str]) -> float:
    text = env.get(TIMEOUT_VARIABLE, "")
    if not text:
        return COLLECTIVE_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise ConfigError(f"the environment variable {TIMEOUT_VARIABLE}={text!r} must be a number of "
                          "seconds > 0 (how long a rank waits for the others in one collective)")
    return value


def open_job(device: str, environ: Mapping[str, str] | None = None) -> Job:
    """The job this process belongs to, its process group open (see the module docstring).

    Raises:
        ConfigError: the ``torchrun`` environment is malformed, or the process group could not
            be formed within the timeout.
    """
    env = os.environ if environ is None else environ
    world = env_int(env, "WORLD_SIZE", 1)
    rank = env_int(env, "RANK", 0)
    local = env_int(env, "LOCAL_RANK", 0)
    if world < 1 or not 0 <= rank < world or local < 0:
        raise ConfigError(f"torchrun environment: RANK={rank}, LOCAL_RANK={local}, WORLD_SIZE={world} "
                          "is not a rank of the job (0 <= RANK < WORLD_SIZE)")
    job = Job(rank, world, local, restarts=env_int(env, "TORCHELASTIC_RESTART_COUNT", 0),
              timeout_s=collective_timeout_s(env))
    if job.distributed:
        timeout = datetime.timedelta(seconds=job.timeout_s)
        try:
            init_from_env(device, timeout=timeout, store=attempt_store(env, job.restarts, timeout))
        except (RuntimeError, ValueError) as exc:
            raise ConfigError(f"torchrun: rank {rank} of {world} could not join the process group "
                              f"within {job.timeout_s:.0f} s: {squeezed(exc, 300)}") from None
    return job
