"""The Gymnasium actor: a vector env of any Gymnasium environment, a policy replica, ring slots.

Beside :class:`actors.sim_actor.SimActor`, it fills the same ring slots with the same rollout
schema from any ``gymnasium.vector.VectorEnv`` that resets in the same step
(``AutoresetMode.SAME_STEP``: the final observation of an episode is in
``infos["final_obs"]``): :class:`actors.workers.process_vec_env.ProcessVecEnv` worker processes, or an
in-process ``SyncVectorEnv``. Box observations (flattened), Discrete, MultiDiscrete and 1-D Box
actions. Its episode statistics are returns and lengths (there is no winner).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from actors.protocol import LeagueSeat, Policy, WeightSource
from actors.stats import ChunkEpisodes
from actors.step import ChunkInterrupted, ContractViolation, PolicyStep, StepTargets, check_slot
from agents.base import seeded_generator
from core.schema import Rollout, RolloutSpec
from monitoring import span


def check_spaces(env_name: str, observation_space: Any, action_space: Any) -> tuple[int, int, torch.dtype]:
    """``(obs_dim, action_dim, action_dtype)`` for spaces the learner can handle; anything else
    raises ``ValueError`` naming the env and the space."""
    spaces = gym.spaces
    if not isinstance(observation_space, spaces.Box) or not np.issubdtype(observation_space.dtype, np.number):
        raise ValueError(f"env {env_name}: observation space {observation_space} is not supported "
                         "(a numeric Box is needed; Dict, Tuple, Text and Graph spaces are not)")
    if len(observation_space.shape) > 1 and observation_space.dtype == np.uint8:
        raise ValueError(f"env {env_name}: image observations {observation_space} are not supported "
                         "(the policy is an MLP over flat vectors)")
    obs_dim = int(np.prod(observation_space.shape))
    if isinstance(action_space, spaces.Discrete):
        if int(action_space.start) != 0:
            raise ValueError(f"env {env_name}: Discrete action space must start at 0, got {action_space}")
        return obs_dim, 1, torch.int64
    if isinstance(action_space, spaces.MultiDiscrete) and action_space.nvec.ndim == 1:
        return obs_dim, len(action_space.nvec), torch.int64
    if isinstance(action_space, spaces.Box) and len(action_space.shape) == 1:
        return obs_dim, int(action_space.shape[0]), torch.float32
    raise ValueError(f"env {env_name}: action space {action_space} is not supported "
                     "(Discrete, 1-D MultiDiscrete or 1-D Box)")


@dataclass
class EnvStepResult:
    """The flags of one vector-env step, named as the sim's step result is."""

    terminated: Tensor
    truncated: Tensor


@dataclass
class GymDecisionStep(PolicyStep):
    """What one decision step produced; the rollout schema's step fields are read from it."""

    result: EnvStepResult


class GymActor:
    """One experience producer over a Gymnasium vector env.

    Args:
        actor_id: stamp written into every slot this actor commits.
        env: a vector env in ``SAME_STEP`` autoreset mode (owned: :meth:`close` closes it).
        env_name: for messages.
        rollout_len: decision steps T per chunk.
        policy: the actor's replica of the learner's policy (CPU).
        seed: seeds the env (env i gets ``seed + i``) and the policy's sampling generator.
    """

    def __init__(self, actor_id: int, env: gym.vector.VectorEnv, env_name: str, rollout_len: int,
                 policy: Policy, seed: int = 0):
        mode = env.metadata.get("autoreset_mode")
        if mode is not None and getattr(mode, "name", str(mode)).upper() != "SAME_STEP":
            raise ValueError(f"env {env_name}: the actor needs AutoresetMode.SAME_STEP, got {mode}")
        obs_dim, action_dim, action_dtype = check_spaces(
            env_name, env.single_observation_space, env.single_action_space)
        self.actor_id = actor_id
        self.env = env
        self.env_name = env_name
        self.device = torch.device("cpu")
        self.stream = None
        self.uses_cuda_graph = False
        self.graph_error = ""
        self.rollout_len = rollout_len
        self.num_envs = int(env.num_envs)
        self.obs_dim = obs_dim
        self.policy = policy
        self.policy_version = -1
        self.chunks_written = 0
        self.spec = RolloutSpec(rollout_len, self.num_envs, obs_dim, action_dim, action_dtype=action_dtype)
        self._discrete = isinstance(env.single_action_space, gym.spaces.Discrete)
        space = env.single_action_space
        self._low: Tensor | None = None
        self._high: Tensor | None = None
        if isinstance(space, gym.spaces.Box):
            self._low = torch.as_tensor(space.low, dtype=torch.float32)
            self._high = torch.as_tensor(space.high, dtype=torch.float32)
        self.rng = seeded_generator(self.device, (seed * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) % (1 << 63))
        obs, _ = env.reset(seed=seed)
        self._obs = self._as_obs(obs)
        self._bootstrap = torch.zeros(self.num_envs)
        self._running_return = np.zeros(self.num_envs)
        self._running_length = np.zeros(self.num_envs, dtype=np.int64)
        self._chunk_returns: list[float] = []
        self._chunk_lengths: list[int] = []

    @property
    def samples_per_chunk(self) -> int:
        """Agent-steps per chunk (T × B)."""
        return self.rollout_len * self.num_envs

    @property
    def physics_steps_per_chunk(self) -> int:
        """Environment steps per chunk (one per agent-step)."""
        return self.samples_per_chunk

    def _as_obs(self, obs: Any) -> Tensor:
        return torch.as_tensor(np.asarray(obs), dtype=torch.float32).reshape(self.num_envs, self.obs_dim)

    @property
    def league_seat(self) -> LeagueSeat | None:
        """None: a Gymnasium env has no opponent for a league to choose."""
        return None

    def sync_weights(self, source: WeightSource) -> int:
        """Copy newer published weights into the replica."""
        self.policy_version = source.pull(self.policy, self.policy_version, reader_id=self.actor_id,
                                          stream=None)
        return self.policy_version

    def _env_actions(self, actions: Tensor) -> np.ndarray:
        if self._discrete:
            return actions[:, 0].numpy()
        if self._low is not None and self._high is not None:
            # The policy's Gaussian samples are unbounded; the env gets them clipped to its box
            # (the slot keeps the sample, whose log-probability the learner needs).
            return torch.clamp(actions, self._low, self._high).numpy()
        return actions.numpy()

    def _act(self) -> tuple[Tensor, Tensor, Tensor, np.ndarray]:
        actions, log_probs, values = self.policy.act(self._obs, generator=self.rng)
        return actions, log_probs, values, self._env_actions(actions)

    def step_into(self, targets: StepTargets) -> None:
        """One decision step for every environment (a blocking env step), written to ``targets``."""
        actions, log_probs, values, env_actions = self._act()
        obs, reward, terminated, truncated, info = self.env.step(env_actions)
        self._record(targets, actions, log_probs, values, obs, reward, terminated, truncated, info)

    def _record(self, targets: StepTargets, actions: Tensor, log_probs: Tensor, values: Tensor,
                obs: Any, reward: Any, terminated: Any, truncated: Any, info: dict[str, Any]) -> None:
        """Write one step's outputs to ``targets`` and move to the next observation."""
        reward_t = torch.as_tensor(np.asarray(reward), dtype=torch.float32)
        if not bool(torch.isfinite(reward_t).all()):
            raise ContractViolation(f"env {self.env_name} returned non-finite rewards")
        term = torch.as_tensor(np.asarray(terminated, dtype=bool))
        trunc = torch.as_tensor(np.asarray(truncated, dtype=bool))
        self._bootstrap.zero_()
        if bool(trunc.any()):
            final = self._obs_with_finals(obs, info, trunc)
            self._bootstrap.copy_(torch.where(trunc, self.policy.get_value(final), 0.0))
        step = GymDecisionStep(obs=self._obs, actions=actions, log_probs=log_probs, values=values,
                               rewards=reward_t, bootstrap_values=self._bootstrap,
                               result=EnvStepResult(term, trunc))
        for f in self.spec.step_fields:
            targets.fields[f.name].copy_(f.read(step))
        done = (term | trunc).numpy()
        targets.done.copy_(torch.as_tensor(done))
        self._running_return += np.asarray(reward, dtype=np.float64)
        self._running_length += 1
        targets.lengths.copy_(torch.as_tensor(self._running_length))
        for i in np.flatnonzero(done):
            self._chunk_returns.append(float(self._running_return[i]))
            self._chunk_lengths.append(int(self._running_length[i]))
            self._running_return[i] = 0.0
            self._running_length[i] = 0
        self._obs = self._as_obs(obs)

    def _obs_with_finals(self, obs: Any, info: dict[str, Any], mask: Tensor) -> Tensor:
        """``obs`` with the final observation of every environment in ``mask``."""
        final = np.array(obs, dtype=np.float32, copy=True).reshape(self.num_envs, -1)
        finals = info.get("final_obs")
        if finals is None:
            raise ValueError(f"env {self.env_name}: a truncated episode without info['final_obs']")
        for i in np.flatnonzero(mask.numpy()):
            final[i] = np.asarray(finals[i], dtype=np.float32).reshape(-1)
        return torch.from_numpy(final)

    @torch.no_grad()
    def rollout(self, slot: Rollout, should_stop: Callable[[], bool] | None = None) -> None:
        """Write one T-step chunk into ``slot`` (a CPU ring slot)."""
        check_slot(slot, self.spec, self.actor_id)
        self._chunk_returns, self._chunk_lengths = [], []
        done = torch.zeros(self.num_envs, dtype=torch.bool)
        lengths = torch.zeros(self.num_envs, dtype=torch.int64)
        with span(f"actor:{self.actor_id}:rollout"):
            for t in range(self.rollout_len):
                if should_stop is not None and should_stop():
                    raise ChunkInterrupted(f"actor {self.actor_id}: stopped at step {t}")
                self.step_into(StepTargets(slot.row(t), done, lengths))
            slot.next_values.copy_(self.policy.get_value(self._obs))
        self.chunks_written += 1

    @property
    def steps_on_event_loop(self) -> bool:
        """Whether :meth:`rollout_async` can await the env's workers from an event loop."""
        return hasattr(self.env, "recv_async") and hasattr(self.env, "send")

    @torch.no_grad()
    async def rollout_async(self, slot: Rollout, should_stop: Callable[[], bool] | None = None) -> None:
        """:meth:`rollout` on an event loop: the policy acts, the actions go to the worker
        processes, and the loop awaits their replies (readers on their pipes, no busy wait),
        free for the learner and the other actors meanwhile."""
        check_slot(slot, self.spec, self.actor_id)
        env: Any = self.env
        self._chunk_returns, self._chunk_lengths = [], []
        done = torch.zeros(self.num_envs, dtype=torch.bool)
        lengths = torch.zeros(self.num_envs, dtype=torch.int64)
        for t in range(self.rollout_len):
            if should_stop is not None and should_stop():
                raise ChunkInterrupted(f"actor {self.actor_id}: stopped at step {t}")
            actions, log_probs, values, env_actions = self._act()
            env.send(env_actions)
            batch = await env.recv_async()
            if len(batch.env_ids) != self.num_envs:
                raise ValueError(f"env {self.env_name}: the pool returned {len(batch.env_ids)} envs, "
                                 f"not all {self.num_envs} (the actor needs batch_size = num_envs)")
            # Workers reply in the order they finish: put the rows back in env order.
            order = np.argsort(batch.env_ids)
            infos = dict(batch.infos)
            if "final_obs" in infos:
                infos["final_obs"] = np.asarray(infos["final_obs"], dtype=object)[order]
            self._record(StepTargets(slot.row(t), done, lengths), actions, log_probs, values,
                         batch.obs[order], batch.rewards[order], batch.terminated[order],
                         batch.truncated[order], infos)
        slot.next_values.copy_(self.policy.get_value(self._obs))
        self.chunks_written += 1

    def chunk_episodes(self) -> ChunkEpisodes:
        """Returns and lengths of the episodes that ended in the last chunk (no outcomes: an
        env has no winner)."""
        return ChunkEpisodes(0, 0, 0, torch.tensor(self._chunk_lengths, dtype=torch.int64),
                             torch.tensor(self._chunk_returns, dtype=torch.float64))

    def check_errors(self) -> None:
        """Nothing deferred: a Gymnasium env's errors are raised where they happen."""

    def wait_started(self) -> None:
        """Nothing to wait for: the env was reset when the actor was built."""

    def close(self) -> None:
        """Close the vector env (its worker processes)."""
        self.env.close()
