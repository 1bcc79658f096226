"""Replays of evaluation matches: which environments to record and where their files go.

``pipeline.evaluate --record DIR`` and the launcher's end-of-run evaluation record a few
episodes of each match (environment 0, 1, ... of the first batch, half with the agent flying
red and half blue) into ``DIR/<agent>-vs-<opponent>-<k>.replay`` (see :mod:`sim.replay.format`;
``python -m pipeline.replay FILE`` draws one).
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sim import BatchedSim
from sim.replay.format import ReplayWriter
from sim.replay.recorder import Recorder

REPLAY_SUFFIX = ".replay"


def safe_name(spec: str) -> str:
    """An entrant spec as a file-name part: a checkpoint path becomes its last parts."""
    parts = [p for p in re.split(r"[/\\]+", spec) if p and p not in (".", "..")]
    text = "_".join(parts[-2:]) if len(parts) > 1 else (parts[0] if parts else "agent")
    text = re.sub(r"\.pt$", "", text)
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", text)[:60] or "agent"


def replay_header(sim: BatchedSim, env: int, episode: int, red: str, blue: str, **extra: Any) -> dict[str, Any]:
    """The header of a replay of ``sim``'s environment ``env``, episode ``episode``."""
    cfg = sim.config
    return {
        "sim_config": cfg.to_dict(),
        "agents": {"red": red, "blue": blue},
        "seed": sim.seed,
        "scenario": cfg.scenario,
        "env_index": env,
        "episode": episode,
        "missiles_per_fighter": cfg.missiles_per_fighter,
        "decision_dt_s": cfg.decision_dt_s,
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **extra,
    }


class MatchRecorder:
    """Counts the replays of one match and opens their files (first episodes only)."""

    def __init__(self, directory: str | Path, agent: str, opponent: str, episodes: int,
                 agent_label: str | None = None) -> None:
        self.directory = Path(directory)
        self.agent, self.opponent = agent, opponent
        self.agent_label = agent_label or agent
        """The agent's name in the file names (the header always holds its spec)."""
        self.remaining = max(int(episodes), 0)
        self.written: list[Path] = []
        self._next = 0

    def attach(self, sim: BatchedSim, agent_side: int, count: int) -> Recorder | None:
        """Record the first episode of ``count`` environments of ``sim`` (fewer if the match's
        quota is spent); None when nothing is to be recorded."""
        count = min(count, self.remaining, sim.num_envs)
        if count <= 0:
            return None
        self.remaining -= count
        red, blue = (self.agent, self.opponent) if agent_side == 0 else (self.opponent, self.agent)
        stem = f"{safe_name(self.agent_label)}-vs-{safe_name(self.opponent)}"

        def open_episode(env: int, episode: int) -> ReplayWriter | None:
            if episode != 0:
                return None
            k = self._next
            self._next += 1
            path = self.directory / f"{stem}-{k:03d}{REPLAY_SUFFIX}"
            return ReplayWriter(path, replay_header(sim, env, episode, red, blue,
                                                    agent_side=agent_side, opponent=self.opponent))

        return Recorder(sim, list(range(count)), open_episode)

    def collect(self, recorder: Recorder | None) -> None:
        """Close ``recorder`` and keep the paths it wrote."""
        if recorder is not None:
            recorder.close()
            self.written.extend(Path(p) for p in recorder.replays_written)
