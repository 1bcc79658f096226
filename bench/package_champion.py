"""Package a trained policy as a champion: ``agents/champions/NAME.pt``, flown by name.

Writes the policy of a checkpoint (a ``.pt`` file, a checkpoints folder or a run directory) as
a policy-only file (``learner.checkpoint.export``: the network, its observation layout and
simulator; no optimizer state), atomically, and prints its size and SHA-256. The champion's
name must be listed in ``agents.champions.CHAMPIONS``, with the command that trained it in that
module's docstring.

    python bench/package_champion.py RUN --name ace --note "python bench/learn_league.py --seed 0"
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.champions import CHAMPIONS
from core.command import CommandParser, run_command
from learner.checkpoint import read_checkpoint
from learner.checkpoint.export import export_policy


def main(argv: list[str] | None = None) -> int:
    p = CommandParser(prog="python bench/package_champion.py", description=__doc__.split("\n\n")[0])
    p.add_argument("source", help="checkpoint file, checkpoints folder or run directory")
    p.add_argument("--name", default="ace", help=f"champion name, one of {', '.join(CHAMPIONS)} (default ace)")
    p.add_argument("--note", default="", help="kept in the file: e.g. the command that trained it")
    p.add_argument("--out", help="write here instead of the champion's packaged file")
    args = p.parse_args(argv)
    if args.out is None and args.name not in CHAMPIONS:
        p.error(f"--name {args.name!r} is no champion: expected one of {', '.join(CHAMPIONS)} "
                "(list a new one in agents.champions.CHAMPIONS first)")
    out = Path(args.out) if args.out else CHAMPIONS[args.name]
    export_policy(args.source, out, note=args.note)  # a bad source: a one-line ValueError
    state = read_checkpoint(out)
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    print(f"wrote {out}: {out.stat().st_size:,} bytes, policy version {state['policy_version']}, "
          f"{state['extra']['agent_steps']} agent-steps, network {state['model_kwargs']['hidden_sizes']}")
    print(f"RESULT name={args.name} bytes={out.stat().st_size} sha256={digest} "
          f"policy_version={state['policy_version']} agent_steps={state['extra']['agent_steps']}")
    return 0


if __name__ == "__main__":
    run_command(main, sys.argv[1:])
