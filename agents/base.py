"""The agent interface: who flies one side of a batch of duels, and the random agent.

An agent is batched over environments: ``act`` maps egocentric observations ``[N, D]`` (one
side's view, see :mod:`sim.layout`) to actions ``[N, 3]`` for that side, and ``reset`` clears
any per-environment memory of the environments whose episode just ended.
"""

from __future__ import annotations

import torch

from sim.actions import ACTION_COMPONENTS, DISCRETE_NVEC
from sim.device import canonical_device

ACTION_MODES = ("discrete", "continuous")


def seeded_generator(device: torch.device | str, seed: int) -> torch.Generator | None:
    """A generator on ``device`` seeded with ``seed``; None on the meta device, which holds
    shapes only (it checks code paths for host reads) and has no generator."""
    device = torch.device(device)
    if device.type == "meta":
        return None
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def _check_action_mode(action_mode: str) -> str:
    if action_mode not in ACTION_MODES:
        raise ValueError(f"action_mode must be one of {ACTION_MODES}, got {action_mode!r}")
    return action_mode


def check_agent_actions(
    actions: torch.Tensor, num_envs: int, action_mode: str, who: str
) -> torch.Tensor:
    """Check an agent's output where it enters the pipeline; returns a 0-dim bool tensor on
    the actions' device, True when some value is out of range.

    The type, shape and dtype are metadata: a wrong one raises ``ValueError`` naming ``who``
    (e.g. ``"opponent 'mypkg.mod:Foo'"``) at once. Left unchecked, a ``[1, 3]`` output would be
    broadcast to every environment and float indices silently truncated. Values are data: they
    are checked on the device without a host read (nothing here waits for the device), and
    the caller ORs the result into a flag it reads at a chunk boundary.

    Out of range means: in ``"discrete"`` mode an index outside ``[0, n)`` for its component's
    ``n`` in :data:`sim.actions.DISCRETE_NVEC`; in ``"continuous"`` mode a NaN or an infinity.
    Finite continuous values outside the bounds are valid: the simulator clips them to rudder
    [−1, 1] and throttle [0, 1] by its rules, and a Gaussian policy's samples rely on it.
    """
    _check_action_mode(action_mode)
    if not isinstance(actions, torch.Tensor):
        raise ValueError(f"{who} returned {type(actions).__name__} actions, not a torch.Tensor")
    if tuple(actions.shape) != (num_envs, len(DISCRETE_NVEC)):
        raise ValueError(
            f"{who} returned actions of shape {tuple(actions.shape)}, expected ({num_envs}, "
            f"{len(DISCRETE_NVEC)}): one ({', '.join(ACTION_COMPONENTS)}) row per environment"
        )
    if action_mode == "discrete":
        if actions.dtype != torch.int64:
            raise ValueError(
                f"{who} returned {actions.dtype} actions; discrete actions are int64 indices"
            )
        # Reductions compared with Python numbers: no index tensor copied to the device, so
        # this also runs inside a captured CUDA graph.
        bad = actions.amin() < 0
        for i, n in enumerate(DISCRETE_NVEC):
            bad = bad | (actions[:, i].amax() >= n)
        return bad
    if not actions.is_floating_point():
        raise ValueError(
            f"{who} returned {actions.dtype} actions; continuous actions are floating point"
        )
    return ~torch.isfinite(actions).all()


def bad_actions_message(who: str, action_mode: str) -> str:
    """The error for a True :func:`check_agent_actions` flag, read at a chunk boundary."""
    if _check_action_mode(action_mode) == "discrete":
        limits = ", ".join(f"{c} in 0..{n - 1}" for c, n in zip(ACTION_COMPONENTS, DISCRETE_NVEC, strict=True))
        return f"{who} returned discrete actions out of range (indices must be {limits})"
    return f"{who} returned non-finite continuous actions (NaN or infinity)"


class BaseAgent:
    """Flies one side of ``num_envs`` duels at once.

    Subclasses implement :meth:`act`; agents with per-environment memory override
    :meth:`reset`, and agents holding tensors override :meth:`to`. Actions are int64
    ``[N, 3]`` indices (rudder 0..2 → −1, 0, +1; throttle 0..2 → 0, 0.5, 1; fire 0..1) in
    ``"discrete"`` mode, finite float ``[N, 3]`` values (rudder, throttle, fire > 0.5; the
    simulator clips rudder to [−1, 1] and throttle to [0, 1]) in ``"continuous"`` mode.
    :func:`check_agent_actions` holds every agent to this where its actions are used.
    """

    def __init__(self, num_envs: int, device: torch.device | str = "cpu", action_mode: str = "discrete"):
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be an integer >= 1, got {num_envs!r}")
        self.num_envs = num_envs
        self.device = canonical_device(device)
        self.action_mode = _check_action_mode(action_mode)
        self.training = False
        self._generator: torch.Generator | None = None

    def act(self, obs: torch.Tensor) -> torch.Tensor:
        """Actions ``[N, 3]`` for observations ``[N, D]``."""
        raise NotImplementedError(f"{type(self).__name__} must implement act()")

    def reset(self, env_mask: torch.Tensor) -> None:
        """Forget per-environment memory where ``env_mask`` (bool ``[N]``) is true."""
        self._check_mask(env_mask)

    def to(self, device: torch.device | str) -> BaseAgent:
        """Move to ``device``; returns self."""
        self.device = canonical_device(device)
        return self

    def prepare(self) -> None:
        """Build now what :meth:`act` would build on its first call (tables, caches), so a
        traced or captured ``act`` never meets host-side setup. Default: nothing."""

    def generators(self) -> list[torch.Generator]:
        """The random generators :meth:`act` draws from, besides the default one (a CUDA graph
        capturing ``act`` must know them on PyTorch versions without lazy registration)."""
        return [] if self._generator is None else [self._generator]

    def train(self) -> BaseAgent:
        """Training mode (stochastic policies sample); returns self."""
        self.training = True
        return self

    def eval(self) -> BaseAgent:
        """Evaluation mode; returns self."""
        self.training = False
        return self

    def _check_obs(self, obs: torch.Tensor, obs_dim: int | None = None) -> None:
        """Raise ``ValueError`` unless ``obs`` is a float ``[num_envs, D]`` tensor."""
        if not isinstance(obs, torch.Tensor):
            raise ValueError(f"obs must be a torch.Tensor, got {type(obs).__name__}")
        if obs.dim() != 2 or obs.shape[0] != self.num_envs:
            raise ValueError(f"obs must have shape ({self.num_envs}, D), got {tuple(obs.shape)}")
        if obs_dim is not None and obs.shape[1] != obs_dim:
            raise ValueError(f"obs must have shape ({self.num_envs}, {obs_dim}), got {tuple(obs.shape)}")
        if not obs.is_floating_point():
            raise ValueError(f"obs must be a floating-point tensor, got {obs.dtype}")

    def _check_mask(self, env_mask: torch.Tensor) -> None:
        if not isinstance(env_mask, torch.Tensor) or env_mask.dtype != torch.bool:
            raise ValueError(f"env_mask must be a bool tensor, got {getattr(env_mask, 'dtype', type(env_mask))}")
        if env_mask.shape != (self.num_envs,):
            raise ValueError(f"env_mask must have shape ({self.num_envs},), got {tuple(env_mask.shape)}")

    def encode(self, rudder: torch.Tensor, throttle: torch.Tensor, fire: torch.Tensor) -> torch.Tensor:
        """Pack per-environment commands into this agent's action format.

        ``rudder`` in {−1, 0, +1}, ``throttle`` in {0, 0.5, 1} (float ``[N]``), ``fire`` bool
        ``[N]``.
        """
        if self.action_mode == "discrete":
            return torch.stack(
                [
                    (rudder.round() + 1).to(torch.int64),
                    (throttle * 2).round().to(torch.int64),
                    fire.to(torch.int64),
                ],
                dim=-1,
            )
        return torch.stack([rudder.float(), throttle.float(), fire.float()], dim=-1)


class RandomAgent(BaseAgent):
    """Uniformly random actions from its own seeded generator (same seed, same actions).

    Discrete: each index uniform over its range; continuous: rudder U(−1, 1), throttle U(0, 1),
    fire with probability ``fire_prob``. In discrete mode fire is also drawn with
    ``fire_prob`` (default 0.5, i.e. uniform).
    """

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        action_mode: str = "discrete",
        seed: int = 0,
        fire_prob: float = 0.5,
    ):
        super().__init__(num_envs, device, action_mode)
        if not 0.0 <= fire_prob <= 1.0:
            raise ValueError(f"fire_prob must be in [0, 1], got {fire_prob}")
        self.seed = seed
        self.fire_prob = fire_prob
        self._generator = seeded_generator(self.device, seed)

    def act(self, obs: torch.Tensor) -> torch.Tensor:
        """Random actions ``[N, 3]``; the observation only fixes the batch size."""
        self._check_obs(obs)
        n, g, dev = self.num_envs, self._generator, self.device
        fire = torch.rand(n, generator=g, device=dev) < self.fire_prob
        if self.action_mode == "discrete":
            idx = torch.randint(0, 3, (n, 2), generator=g, device=dev)
            return torch.cat([idx, fire.to(torch.int64).unsqueeze(-1)], dim=-1)
        u = torch.rand(n, 2, generator=g, device=dev)
        return torch.stack([2 * u[:, 0] - 1, u[:, 1], fire.float()], dim=-1)

    def to(self, device: torch.device | str) -> RandomAgent:
        """Move to ``device`` with a fresh generator seeded as at construction."""
        super().to(device)
        self._generator = seeded_generator(self.device, self.seed)
        return self
