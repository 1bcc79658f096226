"""The seams between the actors and the rest of a run, as protocols.

:class:`Actor` is what the run's loops need of any experience producer (the sim actor in this
process, a sim actor in a process of its own, a Gymnasium env's actor); :class:`LeagueSeat` what
a self-play league reads and changes of an actor between two of its chunks; :class:`Policy` what
an actor needs of its policy replica; :class:`WeightSource` where an actor pulls newer weights
from (``pipeline.transport.weights.WeightPublisher`` is one).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

import torch
from torch import Tensor

from actors.stats import ChunkEpisodes
from agents.base import BaseAgent
from core.schema import Rollout


class Replica(Protocol):
    """Whatever holds a copy of the learner's weights: its state by name, updated in place."""

    def state_dict(self) -> dict[str, Tensor]:
        """The parameters and buffers, by name (views: copying into them updates the replica)."""
        ...


class Policy(Replica, Protocol):
    """What an actor needs of its policy replica (``learner.ActorCritic`` is one)."""

    def act(self, obs: Tensor, deterministic: bool = False,
            generator: torch.Generator | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Actions (sampled from ``generator``), their log-probabilities and the value
        estimates of ``obs``."""
        ...

    def get_value(self, obs: Tensor) -> Tensor:
        """Value estimates of ``obs``."""
        ...


class WeightSource(Protocol):
    """Where an actor's replica gets newer weights (``WeightPublisher``)."""

    def pull(self, module: Replica, local_version: int, reader_id: int = 0,
             stream: torch.cuda.Stream | None = None) -> int:
        """Copy the published weights into ``module`` if newer than ``local_version`` (on
        ``stream`` on CUDA); the version ``module`` now holds."""
        ...


class EnvResultSource(Protocol):
    """An actor's per-environment results, as a league takes them."""

    def take_env_results(self) -> tuple[Tensor, Tensor]:
        """Per-environment wins, draws and losses ``[3, N]`` since the last call and each
        environment's first outcome ``[N]`` (see ``EpisodeStats.take_env_results``)."""
        ...


class LeagueSeat(Protocol):
    """What ``League.before_chunk`` reads and changes of an actor between two of its chunks."""

    @property
    def actor_id(self) -> int: ...

    @property
    def device(self) -> torch.device: ...

    @property
    def opponent(self) -> BaseAgent | None:
        """The actor's opponent (a league's is a ``GroupedOpponent``)."""
        ...

    @property
    def stats(self) -> EnvResultSource: ...

    def restart_envs(self, env_mask: Tensor) -> None:
        """Start new episodes in the masked environments before the next chunk."""
        ...


SlotT = TypeVar("SlotT", bound=Rollout, contravariant=True)
"""The slots an actor writes (any ``Rollout``, or only the slots of one ring)."""


class Actor(Protocol[SlotT]):
    """What the run's loops need of an experience producer, whichever kind it is."""

    @property
    def actor_id(self) -> int: ...

    @property
    def stream(self) -> torch.cuda.Stream | None:
        """The CUDA stream its chunks run on (None off CUDA); a restart hands it on."""
        ...

    @property
    def policy_version(self) -> int:
        """The version of the weights that wrote the last chunk."""
        ...

    @property
    def samples_per_chunk(self) -> int: ...

    @property
    def physics_steps_per_chunk(self) -> int: ...

    @property
    def uses_cuda_graph(self) -> bool: ...

    @property
    def graph_error(self) -> str:
        """Why CUDA graph capture was not used, if it was asked for and failed."""
        ...

    @property
    def steps_on_event_loop(self) -> bool:
        """Whether its chunks are awaited on the event loop (:meth:`rollout_async`: the work runs
        in other processes) rather than run in a thread (:meth:`rollout`)."""
        ...

    @property
    def league_seat(self) -> LeagueSeat | None:
        """The actor as a league sees it (None: it cannot play in a league)."""
        ...

    def sync_weights(self, source: WeightSource) -> int:
        """Pick up newer weights; the version the actor now holds."""
        ...

    def rollout(self, slot: SlotT, should_stop: Callable[[], bool] | None = None) -> None:
        """Write one chunk into ``slot`` (blocking), given up between two decision steps with
        ``ChunkInterrupted`` once ``should_stop`` says so."""
        ...

    async def rollout_async(self, slot: SlotT, should_stop: Callable[[], bool] | None = None) -> None:
        """:meth:`rollout` awaited on the event loop."""
        ...

    def check_errors(self) -> None:
        """Raise a deferred error of the last chunk (at its boundary)."""
        ...

    def chunk_episodes(self) -> ChunkEpisodes:
        """The episodes that ended in the last chunk (host values, at its boundary)."""
        ...

    def wait_started(self) -> None:
        """Return once the actor can take chunks (raise what its start raised)."""
        ...

    def close(self) -> None:
        """Release what the actor runs on (env workers, a process); none is left running."""
        ...
