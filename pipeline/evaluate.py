"""Evaluation: who is better, with confidence intervals and a fitted rating.

``python -m pipeline.evaluate --agent A --opponents straight,pursuit,shooter,crank --episodes 1000``
plays ``A`` against each opponent and prints win / draw / loss rates with Wilson 95% intervals
and the mean episode length; ``--round-robin A,B,C`` plays every pair and rates all entrants by a
maximum-likelihood Bradley–Terry (Elo) fit. An entrant is a scripted name, a champion (``ace``), a
checkpoint (file, checkpoints folder or run directory) or an import path ``package.module:ClassName`` (see
:func:`pipeline.config.specs.build_agent`). Bad input (an unusable entrant, device or ``--json`` path)
is found before the first match and reported as one line, exit status 2.

Fairness and determinism: a match of ``E`` episodes draws ``ceil(E / 2)`` starts from the
seeded scenario generator and plays each start twice, once with the agent as red and once as
blue, so neither side's spawn draw favours anyone. Every environment plays exactly its first
episode; all of them run batched (``--batch`` environments per simulator). Simulator seeds
derive from ``--seed`` and the batch number only, so the same command gives the same table.

This module is the command; the matches, intervals, ratings, tables, entrants and input checks
it runs are in :mod:`pipeline.evaluation`.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import torch

from core.command import CommandParser, run_command
from core.files import write_json_atomic
from pipeline.evaluation.checks import check_device, check_writable, prepare_record_dir
from pipeline.evaluation.entrants import (
    check_entrants,
    expand_pools,
    gym_env_of,
    trained_sim_config,
)
from pipeline.evaluation.matches import play_match
from pipeline.evaluation.ratings import bradley_terry
from pipeline.evaluation.recording import MatchRecorder
from pipeline.evaluation.tables import format_ratings, format_table


def _split(text: str) -> list[str]:
    items = [s.strip() for s in text.split(",") if s.strip()]
    if not items:
        raise ValueError(f"expected a comma-separated list, got {text!r}")
    return items


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m pipeline.evaluate``."""
    p = CommandParser(prog="python -m pipeline.evaluate", description=__doc__.split("\n\n")[0])
    p.add_argument("--agent", help="agent under test: scripted name, champion (ace), checkpoint path or module:Class")
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


def _evaluate_on_gym(args: argparse.Namespace, env: tuple[str, dict]) -> dict:
    """A checkpoint trained on a Gymnasium env: its mean return on that env (the opponents
    and scenario options do not apply); an env that fails in its worker is one line, exit 1."""
    from pipeline.envs.choice import EnvFactory
    from pipeline.evaluation.gym import EvaluationError, evaluate_returns

    try:
        stats = evaluate_returns(args.agent, EnvFactory(env[0], env[1]), args.episodes, seed=args.seed,
                                 deterministic=args.deterministic)
    except EvaluationError as exc:  # the env failed in its worker: a failure, not bad input
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
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
