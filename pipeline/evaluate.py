"""Evaluation: who is better, with confidence intervals and a fitted rating.

``python -m pipeline.evaluate --agent A --opponents straight,pursuit,shooter,crank --episodes 1000``
plays ``A`` against each opponent and prints win / draw / loss rates with Wilson 95% intervals
and the mean episode length; ``--round-robin A,B,C`` plays every pair and rates all entrants by a
maximum-likelihood Bradley–Terry (Elo) fit. An entrant is a scripted name, a checkpoint (file,
checkpoints folder or run directory) or an import path ``package.module:ClassName`` (see
:func:`pipeline.config.specs.build_agent`). Bad input (an unusable entrant, device or ``--json`` path)
is found before the first match and reported as one line, exit status 2.

Fairness and determinism: a match of ``E`` episodes draws ``ceil(E / 2)`` starts from the
seeded scenario generator and plays each start twice, once with the agent as red and once as
blue, so neither side's spawn draw favours anyone. Every environment plays exactly its first
episode; all of them run batched (``--batch`` environments per simulator). Simulator seeds
derive from ``--seed`` and the batch number only, so the same command gives the same table.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from agents import BaseAgent
from core.command import run_command
from learner.checkpoint import (
    list_checkpoints,
    read_checkpoint,
    resolve_checkpoint_path,
    temporary_path,
)
from pipeline.config.specs import build_agent
from pipeline.evaluation.recording import MatchRecorder
from sim import BatchedSim, ObsLayout, SimConfig
from sim.kernels import END_REASONS

Z95 = 1.959963984540054
"""Two-sided 95% normal quantile."""


def wilson_interval(successes: float, trials: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion; (0, 1) when there are no trials."""
    if trials <= 0:
        return 0.0, 1.0
    p = successes / trials
    denom = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    # Exact ends at 0 and n (round-off would otherwise leave 1e-16 gaps).
    lo = 0.0 if successes <= 0 else max(0.0, centre - half)
    hi = 1.0 if successes >= trials else min(1.0, centre + half)
    return lo, hi


@dataclass
class MatchStats:
    """Outcome counts of one agent against one opponent, from the agent's point of view."""

    agent: str
    opponent: str
    episodes: int = 0
    wins: int = 0
    draws: int = 0
    losses: int = 0
    total_length_steps: int = 0
    end_reasons: dict[str, int] = field(default_factory=lambda: dict.fromkeys(END_REASONS[1:], 0))

    @property
    def mean_length_steps(self) -> float:
        """Mean episode length in decision steps."""
        return self.total_length_steps / max(self.episodes, 1)

    def summary(self, decision_dt_s: float) -> dict:
        """Plain dict with rates, Wilson 95% intervals and lengths (for JSON)."""
        out = asdict(self)
        for key, k in (("win", self.wins), ("draw", self.draws), ("loss", self.losses)):
            out[f"{key}_rate"] = k / max(self.episodes, 1)
            out[f"{key}_ci95"] = list(wilson_interval(k, self.episodes))
        out["mean_length_steps"] = self.mean_length_steps
        out["mean_length_s"] = self.mean_length_steps * decision_dt_s
        return out


def play_first_episodes(sim: BatchedSim, red: BaseAgent, blue: BaseAgent) -> dict[str, torch.Tensor]:
    """Run every environment of ``sim`` to the end of its first episode, red and blue flown by
    the given agents. Returns CPU tensors ``winner``, ``length_steps``, ``end_reason`` ``[N]``."""
    n, dev = sim.num_envs, sim.device
    for who, agent in (("red", red), ("blue", blue)):
        if agent.num_envs != n:
            raise ValueError(f"{who} agent has num_envs={agent.num_envs}, the simulator {n}")
    winner = torch.full((n,), -1, dtype=torch.int64, device=dev)
    length = torch.zeros(n, dtype=torch.int64, device=dev)
    reason = torch.zeros(n, dtype=torch.int64, device=dev)
    finished = torch.zeros(n, dtype=torch.bool, device=dev)
    obs = sim.reset()
    everyone = torch.ones(n, dtype=torch.bool, device=dev)
    red.reset(everyone)
    blue.reset(everyone)
    # Asking "all finished?" is a host read: every step on the CPU (free), every 16 elsewhere.
    check_every = 1 if dev.type == "cpu" else 16
    for step in range(sim.config.max_decisions + 1):
        actions = torch.stack([red.act(obs[:, 0]), blue.act(obs[:, 1])], dim=1)
        out = sim.step(actions)
        first = out.done & ~finished
        winner = torch.where(first, out.winner, winner)
        length = torch.where(first, out.episode_steps, length)
        reason = torch.where(first, out.end_reason, reason)
        finished |= out.done
        red.reset(out.done)
        blue.reset(out.done)
        obs = out.obs
        if step % check_every == check_every - 1 and bool(finished.all()):
            break
    sim.check_errors()
    if not bool(finished.all()):
        raise RuntimeError("some episodes did not end within the time limit; the simulator is broken")
    return {"winner": winner.cpu(), "length_steps": length.cpu(), "end_reason": reason.cpu()}


def play_match(
    agent: str,
    opponent: str,
    episodes: int,
    sim_config: SimConfig,
    seed: int = 0,
    device: str = "cpu",
    batch: int = 1024,
    deterministic: bool = False,
    recording: MatchRecorder | None = None,
) -> MatchStats:
    """``agent`` against ``opponent`` over ``episodes`` episodes (rounded up to even): each of
    ``ceil(episodes / 2)`` seeded starts is played with the agent as red and as blue.

    Policies sample from torch's global generator, so each batch runs under a forked generator
    seeded from ``seed`` (the caller's generator state is left untouched); ``deterministic``
    makes policy agents take their most likely action instead. ``recording`` records the first
    episodes of the first batch (half with the agent as red, half as blue) into replays."""
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    stats = MatchStats(agent, opponent)
    starts = (episodes + 1) // 2
    for b, first in enumerate(range(0, starts, batch)):
        n = min(batch, starts - first)
        for agent_side in (0, 1):
            # Same seed for both orientations: identical starts, sides swapped.
            sim = BatchedSim(n, sim_config, device=device, seed=seed * 100_003 + b)
            specs = (agent, opponent) if agent_side == 0 else (opponent, agent)
            flyers = [
                build_agent(
                    s, n, sim.layout, device, seed=seed * 2 + side, action_mode=sim_config.action_mode,
                    sim_config=sim_config, deterministic=deterministic,
                ).eval()
                for side, s in enumerate(specs)
            ]
            cuda = [sim.device] if sim.device.type == "cuda" else []
            recorder = None
            if recording is not None:
                recorder = recording.attach(sim, agent_side, (recording.remaining + 1 - agent_side) // (2 - agent_side))
            with torch.random.fork_rng(devices=cuda):
                torch.manual_seed(seed * 100_003 + b * 2 + agent_side)
                res = play_first_episodes(sim, flyers[0], flyers[1])
            if recording is not None:
                recording.collect(recorder)
            w = res["winner"]
            stats.episodes += n
            stats.wins += int((w == agent_side).sum())
            stats.losses += int((w == 1 - agent_side).sum())
            stats.draws += int((w == 2).sum())
            stats.total_length_steps += int(res["length_steps"].sum())
            counts = torch.bincount(res["end_reason"], minlength=len(END_REASONS))
            for i, name in enumerate(END_REASONS[1:], start=1):
                stats.end_reasons[name] += int(counts[i])
    return stats


def bradley_terry(
    names: list[str], matches: list[MatchStats], iterations: int = 10_000, tol: float = 1e-10
) -> dict[str, dict[str, float]]:
    """Maximum-likelihood Bradley–Terry ratings on the Elo scale from all match results.

    Draws count as half a win for each side. A prior of one virtual draw per pair that played
    keeps ratings finite when an entrant wins every game. Solved by the MM iterations of Hunter
    (2004), ``γ_i ← W_i / Σ_j n_ij / (γ_i + γ_j)``; ratings are ``400·log10(γ)`` shifted so
    their mean is 1500. Standard errors come from the inverse Fisher information.
    """
    index = {n: i for i, n in enumerate(names)}
    k = len(names)
    wins = torch.zeros(k, k, dtype=torch.float64)  # wins[i, j]: points of i against j
    games = torch.zeros(k, k, dtype=torch.float64)
    for m in matches:
        i, j = index[m.agent], index[m.opponent]
        wins[i, j] += m.wins + 0.5 * m.draws
        wins[j, i] += m.losses + 0.5 * m.draws
        games[i, j] += m.episodes
        games[j, i] += m.episodes
    played = games > 0
    wins += 0.5 * played
    games += 1.0 * played
    total = wins.sum(1)
    gamma = torch.ones(k, dtype=torch.float64)
    for _ in range(iterations):
        denom = (games / (gamma[:, None] + gamma[None, :])).sum(1)
        new = torch.where(denom > 0, total / denom.clamp_min(1e-300), gamma)
        new = new / torch.exp(torch.log(new).mean())
        done = bool((torch.log(new) - torch.log(gamma)).abs().max() < tol)
        gamma = new
        if done:
            break
    theta = torch.log(gamma)
    p = torch.sigmoid(theta[:, None] - theta[None, :])
    info = -games * p * (1 - p)
    info.diagonal().copy_(-info.sum(1))
    cov = torch.linalg.pinv(info)  # the null direction (a common shift) is the anchor's freedom
    scale = 400 / math.log(10)
    ratings = scale * theta
    ratings = ratings - ratings.mean() + 1500
    stderr = scale * cov.diagonal().clamp_min(0).sqrt()
    return {n: {"elo": float(ratings[i]), "stderr": float(stderr[i])} for i, n in enumerate(names)}


LEAGUE_STATE = "league.json"
"""The file that marks a folder as a league's pool (``pipeline.league.matchmaking``)."""


def expand_pools(names: list[str]) -> list[str]:
    """Entrants with every league folder (``RUN/league``, holding ``league.json``) replaced by
    its snapshots, oldest first, and its anchors not already named."""
    out: list[str] = []
    for name in names:
        folder = Path(name)
        state = folder / LEAGUE_STATE
        if not (folder.is_dir() and state.is_file()):
            out.append(name)
            continue
        try:
            anchors = [str(a) for a in json.loads(state.read_text())["anchors"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"league state {state} cannot be read: {exc}") from None
        snapshots = [str(p) for p in list_checkpoints(folder)]
        if not snapshots:
            raise ValueError(f"league folder {folder} holds no snapshot yet")
        out += snapshots + [a for a in anchors if a not in names and a not in out]
    return out


def _split(text: str) -> list[str]:
    items = [s.strip() for s in text.split(",") if s.strip()]
    if not items:
        raise ValueError(f"expected a comma-separated list, got {text!r}")
    return items


def _fmt_rate(k: int, n: int) -> str:
    lo, hi = wilson_interval(k, n)
    return f"{k / max(n, 1):6.1%} [{lo:5.1%},{hi:6.1%}]"


def format_table(stats: list[MatchStats], decision_dt_s: float) -> str:
    """The win / draw / loss table as text (one row per match)."""
    # Columns as wide as the longest name, so checkpoint paths are shown whole.
    wa = max([len("agent"), *(len(s.agent) for s in stats)])
    wo = max([len("opponent"), *(len(s.opponent) for s in stats)])
    head = f"{'agent':<{wa}} {'opponent':<{wo}} {'n':>6}  {'win [95% CI]':<22} {'draw [95% CI]':<22} {'loss [95% CI]':<22} {'mean len':>9}"
    rows = [head, "-" * len(head)]
    for s in stats:
        rows.append(
            f"{s.agent:<{wa}} {s.opponent:<{wo}} {s.episodes:>6}  {_fmt_rate(s.wins, s.episodes):<22} "
            f"{_fmt_rate(s.draws, s.episodes):<22} {_fmt_rate(s.losses, s.episodes):<22} "
            f"{s.mean_length_steps * decision_dt_s:>8.1f}s"
        )
    return "\n".join(rows)


def format_ratings(ratings: dict[str, dict[str, float]]) -> str:
    """The fitted ratings as text, best first."""
    w = max([len("entrant"), *(len(n) for n in ratings)])
    rows = [f"{'entrant':<{w}} {'elo':>7} {'± s.e.':>7}", "-" * (w + 16)]
    for name, r in sorted(ratings.items(), key=lambda kv: -kv[1]["elo"]):
        rows.append(f"{name:<{w}} {r['elo']:>7.0f} {r['stderr']:>7.0f}")
    return "\n".join(rows)


def write_json_atomic(path: str | Path, payload: dict) -> None:
    """Write ``payload`` as JSON: temp file in the same (existing) folder, fsync, rename. A
    failed write leaves no temporary file and raises ``OSError`` naming ``path``."""
    path = Path(path)
    tmp = temporary_path(path)
    try:
        with open(tmp, "w") as f:
            json.dump(payload, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):  # on a read-only disk even this unlink fails
            tmp.unlink()
        if isinstance(exc, OSError):
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise


def check_device(spec: str) -> str:
    """``spec`` if this machine has that device (``cpu``, ``cuda``, ``cuda:N``); a one-line
    ``ValueError`` otherwise, before anything is built on it."""
    try:
        device = torch.device(spec)
    except (RuntimeError, ValueError, TypeError):
        raise ValueError(f"--device {spec!r} is not a device (cpu, cuda or cuda:N)") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"--device {spec}: CUDA is not available on this machine (torch {torch.__version__})")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"--device {spec}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif device.type != "cpu":
        raise ValueError(f"--device {spec}: the simulator runs on cpu or cuda[:N] only")
    return spec


def check_writable(path: str | Path, flag: str = "--json") -> None:
    """Refuse, before an evaluation that may take minutes, an output path that cannot be
    written: a directory, a missing folder, a folder where files cannot be created."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{flag} {path} is a directory; give a file name")
    parent = path.parent
    if not parent.is_dir():
        state = "is not a directory" if parent.exists() else "does not exist"
        raise ValueError(f"{flag} {path}: the folder {parent} {state}")
    probe = temporary_path(path)
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        probe.unlink()
    except OSError as exc:
        raise ValueError(f"{flag} {path}: cannot write in {parent}: "
                         f"{(exc.strerror or str(exc)).lower()}") from None


def prepare_record_dir(path: str | Path) -> None:
    """Create the ``--record`` folder (parents included) and check it can be written."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"--record {path} is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"--record {path}: cannot create it: {(exc.strerror or str(exc)).lower()}") from None
    check_writable(path / "probe.replay", "--record")


def check_entrants(specs: list[str], sim_config: SimConfig, device: str) -> None:
    """Build every entrant once, before any match: an unknown name, a missing or damaged
    checkpoint, or one of another observation layout or action mode is a one-line
    ``ValueError`` now rather than after the matches before it were played."""
    layout = ObsLayout.from_config(sim_config)
    for spec in dict.fromkeys(specs):
        build_agent(spec, 1, layout, device, action_mode=sim_config.action_mode, sim_config=sim_config)


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m pipeline.evaluate``."""
    p = argparse.ArgumentParser(prog="python -m pipeline.evaluate", description=__doc__.split("\n\n")[0])
    p.add_argument("--agent", help="agent under test: scripted name, checkpoint path or module:Class")
    p.add_argument("--opponents", default="straight,pursuit,shooter,crank", help="comma-separated opponents")
    p.add_argument("--round-robin", metavar="A,B,C", help="play every pair and fit Bradley–Terry ratings "
                   "(a league folder RUN/league stands for its snapshots and anchors)")
    p.add_argument("--episodes", type=int, default=1000, help="episodes per match (rounded up to even)")
    p.add_argument("--scenario", choices=("random", "head_on"), default="random")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--batch", type=int, default=1024, help="environments per simulator batch")
    p.add_argument("--deterministic", action="store_true", help="policies take their most likely action")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON (into an existing folder)")
    p.add_argument("--record", metavar="DIR", help="write replays of each match into DIR (created if missing)")
    p.add_argument("--record-episodes", type=int, default=2, metavar="N",
                   help="replays per match with --record (default 2: agent as red and as blue)")
    return p


def main(argv: list[str] | None = None) -> dict:
    """Run the evaluation described by ``argv``; prints the table and returns the JSON payload."""
    with torch.no_grad():  # scoped: callers in the same process keep autograd
        return _main(build_parser().parse_args(argv))


def _main(args: argparse.Namespace) -> dict:
    if (args.agent is None) == (args.round_robin is None):
        raise ValueError("give exactly one of --agent or --round-robin")
    if args.episodes < 1:
        raise ValueError(f"--episodes must be >= 1, got {args.episodes}")
    if args.batch < 1:
        raise ValueError(f"--batch must be >= 1, got {args.batch}")
    device = check_device(args.device)
    if args.json:
        check_writable(args.json)
    gym_env = gym_env_of(args.agent) if args.agent is not None else None
    if args.record is not None:
        if args.agent is None:
            raise ValueError("--record records the matches of --agent against --opponents, not a --round-robin")
        if gym_env is not None:
            raise ValueError(f"--record: {args.agent} was trained on {gym_env[0]}; replays are of air-combat duels")
        if args.record_episodes < 1:
            raise ValueError(f"--record-episodes must be >= 1, got {args.record_episodes}")
        prepare_record_dir(args.record)
    if gym_env is not None:
        return _evaluate_on_gym(args, gym_env)
    entrants = expand_pools(_split(args.round_robin)) if args.round_robin is not None else [
        args.agent, *_split(args.opponents)]
    sim_config = dataclasses.replace(trained_sim_config(entrants), scenario=args.scenario)
    if args.round_robin is not None:
        names = entrants
        if len(set(names)) != len(names) or len(names) < 2:
            raise ValueError(f"--round-robin needs at least 2 distinct entrants, got {names}")
        check_entrants(names, sim_config, device)
    else:
        opponents = _split(args.opponents)
        check_entrants([args.agent, *opponents], sim_config, device)
    dt = sim_config.decision_dt_s
    common = {
        "sim_config": sim_config, "seed": args.seed, "device": device, "batch": args.batch,
        "deterministic": args.deterministic,
    }
    payload: dict = {
        "episodes_per_match": args.episodes, "scenario": args.scenario, "seed": args.seed,
        "sides": "each start played twice, agent as red and as blue",
    }
    if args.round_robin is not None:
        stats = [
            play_match(a, b, args.episodes, **common)
            for i, a in enumerate(names) for b in names[i + 1:]
        ]
        ratings = bradley_terry(names, stats)
        print(format_table(stats, dt))
        print()
        print(format_ratings(ratings))
        payload.update(entrants=names, ratings=ratings)
    else:
        stats, replays = [], []
        for o in opponents:
            recording = MatchRecorder(args.record, args.agent, o, args.record_episodes) if args.record else None
            stats.append(play_match(args.agent, o, args.episodes, **common, recording=recording))
            replays += recording.written if recording is not None else []
        print(format_table(stats, dt))
        payload["agent"] = args.agent
        if args.record:
            print(f"wrote {len(replays)} replays into {args.record} (python -m pipeline.replay FILE --png OUT)")
            payload["replays"] = [str(p) for p in replays]
    payload["matches"] = [s.summary(dt) for s in stats]
    if args.json:
        write_json_atomic(args.json, payload)
        print(f"wrote {args.json}")
    return payload


def trained_sim_config(specs: list[str]) -> SimConfig:
    """The simulator the checkpoints among ``specs`` were trained on (their run's ``[sim]``
    section), so that a policy trained with, say, ``sim.obs_reach = true`` is judged on the sim
    it knows; the default ``SimConfig`` when none is a checkpoint. Checkpoints trained on
    different sims cannot meet in one match: a ``ValueError`` names two of them."""
    found: dict[SimConfig, str] = {}
    for spec in specs:
        try:
            path = resolve_checkpoint_path(spec)
        except ValueError:
            continue  # a scripted name or an import path
        sim = ((read_checkpoint(path).get("extra") or {}).get("config") or {}).get("sim")
        if isinstance(sim, dict):
            found.setdefault(dataclasses.replace(SimConfig.from_dict(sim), scenario="random"), str(path))
    if len(found) > 1:
        (a, pa), (b, pb) = list(found.items())[:2]
        diff = ", ".join(f"{k}: {getattr(a, k)!r} != {getattr(b, k)!r}"
                         for k in (f.name for f in dataclasses.fields(SimConfig)) if getattr(a, k) != getattr(b, k))
        raise ValueError(f"{pa} and {pb} were trained on different sims ({diff}); they cannot meet in one match")
    return next(iter(found), SimConfig())


def gym_env_of(agent: str) -> tuple[str, dict] | None:
    """The Gymnasium env (spec, kwargs) a checkpoint was trained on, or None (the sim, or not a
    checkpoint at all)."""
    try:
        path = resolve_checkpoint_path(agent)
    except ValueError:
        return None
    state = read_checkpoint(path)
    layout = state.get("obs_layout") or {}
    if not isinstance(layout, dict) or "env" not in layout:
        return None
    actors = (state.get("extra", {}).get("config") or {}).get("actors", {})
    return str(layout["env"]), dict(actors.get("env_kwargs", {}))


def _evaluate_on_gym(args: argparse.Namespace, env: tuple[str, dict]) -> dict:
    """A checkpoint trained on a Gymnasium env: its mean return on that env (the opponents
    and scenario options do not apply)."""
    from pipeline.envs.choice import EnvFactory
    from pipeline.evaluation.gym import evaluate_returns

    stats = evaluate_returns(args.agent, EnvFactory(env[0], env[1]), args.episodes, seed=args.seed,
                             deterministic=args.deterministic)
    print(stats.line())
    payload = {"agent": args.agent, "env": env[0], "env_kwargs": env[1], "episodes": stats.episodes,
               "mean_return": stats.mean, "ci95": [stats.ci_low, stats.ci_high],
               "mean_length": stats.mean_length, "deterministic": args.deterministic}
    if args.json:
        write_json_atomic(args.json, payload)
        print(f"wrote {args.json}")
    return payload


def run(argv: list[str] | None = None) -> None:
    """Command-line entry: bad input (options, an unknown or unbuildable entrant, a missing or
    damaged checkpoint, an unusable device or output path; ``CheckpointError`` is a
    ``ValueError``) is one line and exit status 2, a failed write of the results one line and
    status 1, instead of a traceback."""
    run_command(main, argv)


if __name__ == "__main__":
    run(sys.argv[1:])
