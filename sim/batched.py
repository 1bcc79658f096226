"""The batched duel simulator: N independent environments stepped together on any torch device."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from sim.actions import ActionChecker, check_action_tensor
from sim.backend import BACKENDS, resolve_backend
from sim.config import SimConfig
from sim.device import canonical_device, require_memory
from sim.kernels import DecisionAccumulators, finish_decision, substep_events, substep_move
from sim.layout import ObsLayout
from sim.memory import bytes_per_env, measuring
from sim.native import NativeKernel
from sim.observe import build_obs, observe_into
from sim.reach.missile import cached_tables
from sim.scenarios import initial_ammo_batch, initial_conditions_batch
from sim.state import SimState


@dataclass
class StepResult:
    """What one decision step returns. Every tensor is a preallocated buffer that the next step
    overwrites: clone what you keep."""

    obs: torch.Tensor  # [N, 2, D] after auto-reset
    final_obs: torch.Tensor  # [N, 2, D] before auto-reset (== obs where not done)
    reward: torch.Tensor  # [N, 2] outcome reward per side (a transposed view: not contiguous)
    terminated: torch.Tensor  # [N] bool
    truncated: torch.Tensor  # [N] bool
    done: torch.Tensor  # [N] bool
    winner: torch.Tensor  # [N] int64: -1 running, 0 red, 1 blue, 2 draw
    end_reason: torch.Tensor  # [N] int64: see sim.kernels.END_REASONS
    episode_steps: torch.Tensor  # [N] int64 decision steps of the (ended) episode
    launches: torch.Tensor  # [N, 2] int64 launches in this decision step
    hits: torch.Tensor  # [N, 2] int64 hits scored in this decision step


class SimObserver(Protocol):
    """Something that watches the sim's state at two moments (e.g. :class:`sim.replay.recorder.Recorder`).

    Both calls come from inside :meth:`BatchedSim.step` / :meth:`BatchedSim.reset`, before any
    buffer is handed back; an observer must not change the state.
    """

    def decision_end(self, state: SimState, acc: DecisionAccumulators) -> None:
        """A decision step's physics and outcome are done, before the ended environments are
        reset (so ``state`` still shows how they ended)."""

    def episodes_started(self, state: SimState, mask: torch.Tensor) -> None:
        """The environments where ``mask`` is set have just started a new episode."""


class BatchedSim:
    """``num_envs`` duels in lockstep, each auto-resetting on its own.

    Args:
        num_envs: number of environments N.
        config: the model and interface settings (validated).
        device: any torch device.
        seed: initial conditions of environment i's k-th episode are a pure function of
            ``(seed, i, k)``.
        compile: fuse the physics step and the decision's closing with ``torch.compile``
            (same results as eager).
        sync_free: never read device data on the host inside ``step`` (resets are masked
            writes over every environment). Default: on for accelerators (no host sync, CUDA
            graph capture possible), off on the CPU, where resetting only the ended
            environments is cheaper. Both give identical results.
        backend: ``"torch"`` (tensor ops; any device, compilable and graph-capturable),
            ``"native"`` (the C++ kernel of sim/native/: CPU only, a whole decision per block
            of environments, idle missile slots skipped; ``compile`` does not apply) or
            ``"auto"``: native on the CPU when the kernel builds and supports the config
            (else torch, with one warning line if the build failed), torch on every other
            device. ``$MIDRANGE_SIM_BACKEND=torch`` turns ``auto`` into torch. Both backends
            pass the same parity suite against sim/reference/scalar.py; they agree to rounding.
            ``"triton"``: a decision's physics and closing as one Triton kernel (sim/fused.py:
            CUDA, or the CPU under ``TRITON_INTERPRET=1``; float32), the rest as the torch
            path (``compile`` applies to the observations); asked for by name only.
    """

    def __init__(
        self,
        num_envs: int,
        config: SimConfig | None = None,
        device: str | torch.device = "cpu",
        seed: int = 0,
        compile: bool = False,
        sync_free: bool | None = None,
        backend: str = "auto",
    ) -> None:
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be an integer >= 1, got {num_envs!r}")
        if config is None:
            config = SimConfig()
        if not isinstance(config, SimConfig):
            raise ValueError(f"config must be a SimConfig, got {type(config).__name__}")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ValueError(f"seed must be an integer, got {seed!r}")
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}")
        self.num_envs = num_envs
        self.config = config
        self.device = canonical_device(device)
        self.backend = resolve_backend(backend, self.device, config)
        """The backend in use: ``"torch"``, ``"native"`` or ``"triton"``."""
        # Refuse a batch that cannot fit before allocating any of it. Meta holds no data, and
        # the small sims that measure the estimate need no check.
        if self.device.type != "meta" and not measuring():
            require_memory(self.estimate_bytes(num_envs, config), self.device, f"BatchedSim({num_envs} envs)")
        self.layout = ObsLayout.from_config(config)
        self.obs_dim = self.layout.size
        self.dtype = getattr(torch, config.dtype)
        self.compiled = compile
        # Data-dependent shortcuts (reset only the environments that ended) need a host read;
        # only CPU runs take them, where a read costs nothing. On accelerators every step is
        # sync-free (masked writes, no branch on device data) and can be captured in a graph.
        self.sync_free = self.device.type != "cpu" if sync_free is None else bool(sync_free)
        self._seed = seed
        self._started = False
        self.observer: SimObserver | None = None
        """Told of every decision's end and every episode start (None: nobody; no cost)."""

        n, d = num_envs, self.obs_dim
        self.state = SimState.allocate(n, config, self.device)
        self._acc = DecisionAccumulators.allocate(n, config.missiles_per_fighter, self.dtype, self.device)
        self._env_index = torch.arange(n, dtype=torch.int64, device=self.device)
        self._obs = torch.zeros(n, 2, d, dtype=self.dtype, device=self.device)
        self._final_obs = torch.zeros_like(self._obs)
        # The kernels write the current frame; with memory (past frames, ``obs_history``, or a
        # trace, ``obs_trace_s``) into buffers of their own, stacked into the observations by
        # ``_stack_frames``.
        self._history = config.obs_history
        self._trace_decay = math.exp(-config.decision_dt_s / config.obs_trace_s) if config.obs_trace_s > 0 else None
        """The trace's weight on what it held (``a``), None without a trace."""
        self._frames = self.layout.frames
        if self._frames > 1:
            self._frame = torch.zeros(n, 2, self.layout.frame_size, dtype=self.dtype, device=self.device)
            self._final_frame = torch.zeros_like(self._frame)
        else:
            self._frame, self._final_frame = self._obs, self._final_obs
        self._episode_steps = torch.zeros(n, dtype=torch.int64, device=self.device)
        self._checker = ActionChecker(self.device, enabled=config.check_actions)
        self._result = StepResult(
            obs=self._obs, final_obs=self._final_obs, reward=self._acc.reward.t(),
            terminated=self._acc.terminated, truncated=self._acc.truncated, done=self._acc.done,
            winner=self._acc.winner, end_reason=self._acc.end_reason,
            episode_steps=self._episode_steps, launches=self._acc.launches.t(),
            hits=self._acc.hits.t(),
        )
        self._native = NativeKernel(self.state, self._acc, config) if self.backend == "native" else None
        self._fused: Callable[..., None] | None = None
        if self.backend == "triton":
            from sim.fused import decision_physics  # imports Triton: only when asked for

            self._fused = decision_physics
        # The two halves of one physics step are the compiled units: the decision loops over
        # them, so compile time does not grow with the number of substeps.
        self._move: Callable[..., None] = substep_move
        self._events: Callable[..., None] = substep_events
        self._finish: Callable[..., None] = finish_decision
        # The reach block's tables are bound here, once, so compiled forms see them as constants.
        tables = cached_tables(config, str(self.device), config.dtype) if config.obs_reach else None
        observe_eager = functools.partial(build_obs, tables=tables)
        self._observe_eager: Callable[..., torch.Tensor] = observe_eager
        self._observe: Callable[..., torch.Tensor] = observe_eager
        self._observe_into: Callable[..., None] = functools.partial(observe_into, tables=tables)
        if compile:
            self._move = torch.compile(substep_move, dynamic=False, fullgraph=True)
            # On the CPU the events phase (a few reductions over the missile slots) runs faster
            # eagerly than as inductor's C++ (measured: bench/RESULTS.md); on accelerators
            # compiling it saves some forty kernel launches per physics step.
            if self.device.type != "cpu":
                self._events = torch.compile(substep_events, dynamic=False, fullgraph=True)
            self._finish = torch.compile(finish_decision, dynamic=False, fullgraph=True)
            self._observe = torch.compile(
                functools.partial(build_obs, fused=True, tables=tables), dynamic=False, fullgraph=True
            )
            self._observe_into = torch.compile(
                functools.partial(observe_into, fused=True, tables=tables), dynamic=False,
                fullgraph=True,
            )

    # ------------------------------------------------------------------ memory

    @classmethod
    def estimate_bytes(cls, num_envs: int, config: SimConfig | None = None) -> int:
        """Peak bytes a ``BatchedSim(num_envs, config)`` allocates on its device: the state,
        accumulator and observation buffers it holds, plus the temporaries of a reset and of a
        step (in eager mode about twice the buffers again; compiled steps need fewer).

        Measured, not written down, so a buffer added to the sim is counted without a change
        here: once per config, a small sim is built, reset and stepped through the end of every
        episode under :func:`sim.device.peak_bytes`, in both forms (sync-free and not); every
        allocation is a fixed size per environment, so the larger peak divided by the batch
        size, rounded up, is the cost of one environment.
        """
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be an integer >= 1, got {num_envs!r}")
        config = SimConfig() if config is None else config
        if not isinstance(config, SimConfig):
            raise ValueError(f"config must be a SimConfig, got {type(config).__name__}")
        return bytes_per_env(config, cls) * num_envs

    # ------------------------------------------------------------------ episodes

    @property
    def seed(self) -> int:
        return self._seed

    def reseed(self, seed: int) -> None:
        """Use a new seed; the next :meth:`reset` starts every environment at episode 0."""
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ValueError(f"seed must be an integer, got {seed!r}")
        self._seed = seed
        self._started = False

    def reset(self, env_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Start new episodes in the masked environments (all if None) and return the
        observations of every environment, ``[N, 2, D]`` (a buffer the next step overwrites).

        Unmasked environments are left bit-identical.
        """
        n = self.num_envs
        if env_mask is None or not self._started:
            mask = torch.ones(n, dtype=torch.bool, device=self.device)
        else:
            if not isinstance(env_mask, torch.Tensor) or env_mask.dtype != torch.bool:
                raise ValueError("env_mask must be a bool tensor")
            if tuple(env_mask.shape) != (n,):
                raise ValueError(f"env_mask must have shape ({n},), got {tuple(env_mask.shape)}")
            if env_mask.device != self.device:
                raise ValueError(f"env_mask must be on device {self.device}, got {env_mask.device}")
            mask = env_mask
        if not self._started:
            self.state.episode_index.zero_()
            self._started = True
        else:
            self.state.episode_index.add_(mask.long())
        self._reset_envs(mask)
        if self.observer is not None:
            self.observer.episodes_started(self.state, mask)
        if self._native is not None:
            self._native.observe(mask.nonzero().squeeze(-1), self._frame)
        else:
            self._frame.copy_(torch.where(mask.view(n, 1, 1), self._observe(self.state, self.config), self._frame))
        if self._frames > 1:
            # A new episode's past frames and trace are its first frame.
            self._obs.copy_(torch.where(mask.view(n, 1, 1), self._frame.repeat(1, 1, self._frames), self._obs))
        return self._obs

    def _reset_envs(self, mask: torch.Tensor) -> None:
        if self.sync_free:
            self._write_initial(mask, self._env_index)
            return
        idx = mask.nonzero().squeeze(-1)
        if idx.numel():
            self._write_initial(None, idx)

    def _write_initial(self, mask: torch.Tensor | None, idx: torch.Tensor) -> None:
        """New-episode state for the environments in ``idx`` (if ``mask`` is None) or, without
        any data-dependent shape, for those where ``mask`` is set (``idx`` then spans all)."""
        cfg, s = self.config, self.state
        episode = s.episode_index[idx] if mask is None else s.episode_index
        pos, heading, speed = initial_conditions_batch(cfg, self._seed, idx, episode, self.dtype)
        ammo: torch.Tensor | int = cfg.missiles_per_fighter
        if cfg.spawn_partial_ammo > 0:
            ammo = initial_ammo_batch(cfg, self._seed, idx, episode).t()
        new: dict[str, torch.Tensor | float] = {
            "f_px": pos[..., 0].t(), "f_py": pos[..., 1].t(),
            "f_vx": (speed * torch.cos(heading)).t(), "f_vy": (speed * torch.sin(heading)).t(),
            "f_throttle": 1.0, "f_rudder": 0.0, "f_alive": True, "f_ammo": ammo,
            "f_since_launch": cfg.cooldown_steps, "f_fire_req": False,
            "m_active": False, "m_px": 0.0, "m_py": 0.0, "m_vx": 0.0, "m_vy": 0.0,
            "m_rudder": 0.0, "m_steps": 0, "physics_steps": 0, "decision_steps": 0,
        }
        for name, value in new.items():
            target = getattr(s, name)
            if isinstance(value, torch.Tensor):
                value = value.to(target.dtype)
            if mask is None:
                target[..., idx] = value
            else:
                # Python scalars go straight into where(): no host-to-device copy, so this also
                # runs inside CUDA graph capture.
                target.copy_(torch.where(mask, value, target))

    # ------------------------------------------------------------------ stepping

    def step(self, actions: torch.Tensor) -> StepResult:
        """Advance every environment by one decision step (``physics_steps_per_decision``
        physics steps) and auto-reset the ones that ended.

        ``actions`` is ``[N, 2, 3]``: int64 indices in discrete mode, floats in continuous
        mode (see sim/RULES.md). Raises ``ValueError`` on a wrong shape, dtype or device, and on
        NaN or out-of-range values (on CUDA at the next :meth:`check_errors`).
        """
        if not self._started:
            raise RuntimeError("call reset() before step()")
        cfg, s, acc = self.config, self.state, self._acc
        check_action_tensor(actions, self.num_envs, self.device, cfg.action_mode)
        if cfg.action_mode == "discrete":
            rudder, throttle, fire = self._checker.discrete(actions)
        else:
            rudder, throttle, fire = self._checker.continuous(actions)
        s.f_rudder.copy_(rudder.t())
        s.f_throttle.copy_(throttle.t())
        s.f_fire_req.copy_(fire.t())
        if self._native is not None:
            return self._step_native()
        if self._fused is not None:
            self._fused(s, acc, cfg)
        else:
            acc.begin()
            for _ in range(cfg.physics_steps_per_decision):
                self._move(s, acc, cfg)
                self._events(s, acc, cfg)
            self._finish(s, acc, cfg)
        if self.observer is not None:
            self.observer.decision_end(s, acc)
        self._observe_into(s, cfg, self._final_frame)
        self._episode_steps.copy_(s.decision_steps)
        done = acc.done
        if self.sync_free:
            s.episode_index.add_(done.long())
            self._write_initial(done, self._env_index)
            self._observe_into(s, cfg, self._frame, fresh=done, previous=self._final_frame)
        else:
            self._frame.copy_(self._final_frame)
            self._start_ended(done)
        self._stack_frames(done)
        if self.observer is not None:
            self.observer.episodes_started(s, done)
        return self._result

    def _step_native(self) -> StepResult:
        """The rest of :meth:`step` on the native kernel: one call for the physics, the closing
        and the observations, then the resets of the environments that ended."""
        s, native = self.state, self._native
        assert native is not None
        native.decision_step(self._frame, self._final_frame)
        if self.observer is not None:
            self.observer.decision_end(s, self._acc)
        self._episode_steps.copy_(s.decision_steps)
        done = self._acc.done
        self._start_ended(done)
        self._stack_frames(done)
        if self.observer is not None:
            self.observer.episodes_started(s, done)
        return self._result

    def _start_ended(self, done: torch.Tensor) -> None:
        """The environments that ended start their next episode, found on the host (the
        CPU's way: only those few get new initial conditions and observations)."""
        s = self.state
        idx = done.nonzero().squeeze(-1)
        if idx.numel():
            s.episode_index[idx] += 1
            self._write_initial(None, idx)
            if self._native is not None:
                self._native.observe(idx, self._frame)
            else:
                self._frame[idx] = self._observe_eager(s.select(idx), self.config)

    def _stack_frames(self, done: torch.Tensor) -> None:
        """With memory: the final observations become the new frame before the past ones
        shifted by one (the oldest dropped) and the trace moved towards the new frame, and the
        observations those, except where an episode ended, whose next one starts with every
        frame and the trace its first. Masked writes only, no host read, so this runs inside a
        captured graph as well."""
        if self._frames == 1:
            return
        k, size, a = self._history, self.layout.frame_size, self._trace_decay
        if a is not None:  # m ← a·m + (1 − a)·frame, in one op, from the observations' trace
            start = (1 + k) * size
            torch.lerp(self._obs[..., start:], self._final_frame, 1.0 - a, out=self._final_obs[..., start:])
        if k:
            self._final_obs[..., size:(1 + k) * size].copy_(self._obs[..., : k * size])
        self._final_obs[..., :size].copy_(self._final_frame)
        fresh = self._frame.repeat(1, 1, self._frames)
        self._obs.copy_(torch.where(done.view(-1, 1, 1), fresh, self._final_obs))

    @property
    def result(self) -> StepResult:
        """The step result :meth:`step` returns: the same tensors every step, written in place."""
        return self._result

    def check_errors(self) -> None:
        """Raise any deferred action error (CUDA: one host read; call at chunk boundaries)."""
        self._checker.raise_if_bad()

    @property
    def physics_steps_per_decision(self) -> int:
        return self.config.physics_steps_per_decision
