"""The actor-critic network: two MLPs (policy and value) over normalized observations.

Sampling uses the Gumbel-max trick and hand-written log-probabilities instead of
``torch.distributions``: no argument validation, no host synchronization and static shapes, so
the rollout step can be compiled or captured as a CUDA graph.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from learner.normalization import RunningObsNorm
from learner.spaces import ActionSpec

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def _mlp(in_dim: int, hidden_sizes: tuple[int, ...], out_dim: int, activation: str,
         out_gain: float) -> nn.Sequential:
    act = nn.Tanh if activation == "tanh" else nn.ReLU
    layers: list[nn.Module] = []
    last = in_dim
    for width in hidden_sizes:
        layers += [_orthogonal(nn.Linear(last, width), math.sqrt(2.0)), act()]
        last = width
    layers.append(_orthogonal(nn.Linear(last, out_dim), out_gain))
    return nn.Sequential(*layers)


def _orthogonal(layer: nn.Linear, gain: float) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class ActorCritic(nn.Module):
    """Actor-critic MLP for one :class:`ActionSpec`.

    The policy head gives categorical logits per component (``discrete``/``multi_discrete``) or
    Gaussian means with a state-independent log-std parameter (``continuous``). Observations are
    normalized by :attr:`obs_norm` (running statistics, saved in ``state_dict()``) before both
    MLPs. Orthogonal initialization: gain √2 in hidden layers, 0.01 on the policy output, 1 on
    the value output.

    ``mirror`` makes the network equivariant under a symmetry of the task, exactly and whatever
    its weights: ``{"obs_sign": [±1] * obs_dim, "perm": [...], "sign": [±1] * num_logits}``
    says that the mirror image of observation ``o`` is ``o * obs_sign`` and that of a head
    output ``h`` is ``h[perm] * sign``. Both MLPs then see each observation and its mirror image
    (one batch of twice the rows), and the head is the mean of the one and the mirrored other
    (``½ (h(o) + M h(o * obs_sign))``), the value the mean of both values: the policy acts in the
    mirrored fight as the mirror image of how it acts in the fight, so every sample teaches
    both sides. For the air-combat sim: :attr:`sim.layout.ObsLayout.mirror_signs` and
    :meth:`learner.spaces.ActionSpec.sim_mirror` (``ppo.mirror``).
    """

    mirror_obs_sign: Tensor
    mirror_perm: Tensor
    mirror_head_sign: Tensor

    def __init__(self, obs_dim: int, action_spec: ActionSpec, hidden_sizes: tuple[int, ...] = (256, 256),
                 activation: str = "tanh", normalize_obs: bool = True, obs_norm_clip: float = 10.0,
                 mirror: dict[str, list[Any]] | None = None) -> None:
        super().__init__()
        if isinstance(obs_dim, bool) or not isinstance(obs_dim, int) or obs_dim < 1:
            raise ValueError(f"obs_dim must be a positive int, got {obs_dim!r}")
        if not isinstance(action_spec, ActionSpec):
            raise ValueError(f"action_spec must be an ActionSpec, got {type(action_spec).__name__}")
        if activation not in ("tanh", "relu"):
            raise ValueError(f"activation must be 'tanh' or 'relu', got {activation!r}")
        self.obs_dim = obs_dim
        self.action_spec = action_spec
        self.hidden_sizes = tuple(int(h) for h in hidden_sizes)
        self.activation = activation
        self.normalize_obs = bool(normalize_obs)
        self.obs_norm = RunningObsNorm(obs_dim, clip=obs_norm_clip)
        self.actor = _mlp(obs_dim, self.hidden_sizes, action_spec.num_logits, activation, 0.01)
        self.critic = _mlp(obs_dim, self.hidden_sizes, 1, activation, 1.0)
        if action_spec.is_discrete:
            self.log_std = None
        else:
            self.log_std = nn.Parameter(torch.zeros(action_spec.dim))
        self._splits = list(action_spec.nvec)
        self.mirror = self._check_mirror(mirror, obs_dim, action_spec.num_logits)
        if self.mirror is not None:
            # Not saved in state_dict (they follow from the constructor's ``mirror``).
            self.register_buffer("mirror_obs_sign", torch.tensor(self.mirror["obs_sign"]), persistent=False)
            self.register_buffer("mirror_perm", torch.tensor(self.mirror["perm"], dtype=torch.int64),
                                 persistent=False)
            self.register_buffer("mirror_head_sign", torch.tensor(self.mirror["sign"]), persistent=False)
        # Filled in by learner.checkpoint.load_policy: the observation layout metadata and the
        # policy version the loaded weights were saved with (None / 0 for a fresh network).
        self.obs_layout: dict[str, Any] | None = None
        self.policy_version = 0

    @staticmethod
    def _check_mirror(mirror: dict[str, list[Any]] | None, obs_dim: int,
                      num_logits: int) -> dict[str, list[Any]] | None:
        """``mirror`` as plain lists, checked: signs of ±1 of the right lengths and a head map
        that is its own inverse (mirroring twice gives back the original)."""
        if mirror is None:
            return None
        if not isinstance(mirror, dict) or set(mirror) != {"obs_sign", "perm", "sign"}:
            raise ValueError(f"mirror must be a dict with keys obs_sign, perm and sign, got {mirror!r}")
        obs_sign = [float(v) for v in mirror["obs_sign"]]
        perm = [int(v) for v in mirror["perm"]]
        sign = [float(v) for v in mirror["sign"]]
        if len(obs_sign) != obs_dim or any(v not in (-1.0, 1.0) for v in obs_sign):
            raise ValueError(f"mirror['obs_sign'] must hold {obs_dim} values of +1 or -1")
        if len(sign) != num_logits or any(v not in (-1.0, 1.0) for v in sign):
            raise ValueError(f"mirror['sign'] must hold {num_logits} values of +1 or -1")
        if sorted(perm) != list(range(num_logits)):
            raise ValueError(f"mirror['perm'] must be a permutation of 0..{num_logits - 1}, got {perm}")
        if any(perm[perm[i]] != i or sign[i] != sign[perm[i]] for i in range(num_logits)):
            raise ValueError(f"mirror's head map (perm {perm}, sign {sign}) is not its own inverse")
        return {"obs_sign": obs_sign, "perm": perm, "sign": sign}

    def init_kwargs(self) -> dict[str, Any]:
        """Constructor arguments (plain types), enough to rebuild this network from a checkpoint."""
        kwargs: dict[str, Any] = {
            "obs_dim": self.obs_dim,
            "action_spec": self.action_spec.to_dict(),
            "hidden_sizes": list(self.hidden_sizes),
            "activation": self.activation,
            "normalize_obs": self.normalize_obs,
            "obs_norm_clip": self.obs_norm.clip,
        }
        if self.mirror is not None:
            kwargs["mirror"] = {k: list(v) for k, v in self.mirror.items()}
        return kwargs

    @classmethod
    def from_init_kwargs(cls, kwargs: dict[str, Any]) -> ActorCritic:
        """Inverse of :meth:`init_kwargs`."""
        kw = dict(kwargs)
        kw["action_spec"] = ActionSpec.from_dict(kw["action_spec"])
        kw["hidden_sizes"] = tuple(kw["hidden_sizes"])
        return cls(**kw)

    def set_policy_bias(self, bias: tuple[float, ...] | list[float]) -> None:
        """Set the policy head's output biases (one per logit or mean): the initial action prior."""
        out = self.actor[-1]
        assert isinstance(out, nn.Linear)
        if len(bias) != out.out_features:
            raise ValueError(f"policy_bias needs {out.out_features} values (one per logit of "
                             f"{self.action_spec.nvec if self.action_spec.is_discrete else 'the means'}), "
                             f"got {len(bias)}")
        with torch.no_grad():
            out.bias.copy_(torch.tensor([float(b) for b in bias], dtype=out.bias.dtype))

    # ------------------------------------------------------------------ internals
    def _check_obs(self, obs: Tensor) -> Tensor:
        if obs.dim() != 2 or obs.shape[1] != self.obs_dim:
            raise ValueError(f"obs must have shape (B, {self.obs_dim}), got {tuple(obs.shape)}")
        if obs.dtype != self.obs_norm.mean.dtype:
            obs = obs.to(self.obs_norm.mean.dtype)
        return obs

    def _check_actions(self, obs: Tensor, actions: Tensor) -> None:
        if actions.dim() != 2 or actions.shape[0] != obs.shape[0] or actions.shape[1] != self.action_spec.dim:
            raise ValueError(
                f"actions must have shape ({obs.shape[0]}, {self.action_spec.dim}), got {tuple(actions.shape)}"
            )

    def _features(self, obs: Tensor) -> Tensor:
        return self.obs_norm(obs) if self.normalize_obs else obs

    def forward(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """Raw head outputs for ``obs [B, D]``: (logits or means ``[B, num_logits]`` in float32,
        value ``[B]`` in float32)."""
        obs = self._check_obs(obs)
        if self.mirror is None:
            x = self._features(obs)
            return self.actor(x).float(), self.critic(x).squeeze(-1).float()
        n = obs.shape[0]
        x = self._features(torch.cat([obs, obs * self.mirror_obs_sign.to(obs.dtype)]))
        head, value = self.actor(x).float(), self.critic(x).squeeze(-1).float()
        return self._mirror_mean(head, n), 0.5 * (value[:n] + value[n:])

    def policy_head(self, obs: Tensor) -> Tensor:
        """The head outputs of :meth:`forward` alone ``[B, num_logits]``, without the critic's
        pass: what choosing an action needs."""
        obs = self._check_obs(obs)
        if self.mirror is None:
            return self.actor(self._features(obs)).float()
        n = obs.shape[0]
        head = self.actor(self._features(torch.cat([obs, obs * self.mirror_obs_sign.to(obs.dtype)]))).float()
        return self._mirror_mean(head, n)

    def _mirror_mean(self, head: Tensor, n: int) -> Tensor:
        """The mean of the head at the ``n`` observations and, mirrored back, at their mirror
        images (rows ``n:``)."""
        mirrored = head[n:].index_select(1, self.mirror_perm) * self.mirror_head_sign
        return 0.5 * (head[:n] + mirrored)

    def _log_prob_entropy(self, head: Tensor, actions: Tensor, entropy_weights: tuple[float, ...] = (),
                          log_prob_weights: tuple[float, ...] = ()) -> tuple[Tensor, Tensor]:
        """The log-probability of ``actions`` and the entropy, each summed over the action
        components, each component weighted by ``log_prob_weights`` and ``entropy_weights``
        where given (scalar weights, one product each: no host-to-device copy of a weight
        tensor per minibatch)."""
        for name, weights in (("entropy_weights", entropy_weights), ("log_prob_weights", log_prob_weights)):
            if weights and len(weights) != self.action_spec.dim:
                raise ValueError(f"{name} needs {self.action_spec.dim} values (one per action "
                                 f"component), got {len(weights)}")
        if self.log_std is None:
            log_prob = head.new_zeros(head.shape[0])
            entropy = head.new_zeros(head.shape[0])
            for i, logits in enumerate(torch.split(head, self._splits, dim=-1)):
                logp_all = torch.log_softmax(logits, dim=-1)
                w = log_prob_weights[i] if log_prob_weights else 1.0
                if w != 0.0:
                    picked = logp_all.gather(-1, actions[:, i:i + 1]).squeeze(-1)
                    log_prob = log_prob + (picked if w == 1.0 else picked * w)
                w = entropy_weights[i] if entropy_weights else 1.0
                if w != 0.0:
                    head_entropy = -(logp_all.exp() * logp_all).sum(-1)
                    entropy = entropy + (head_entropy if w == 1.0 else head_entropy * w)
            return log_prob, entropy
        log_std = self.log_std.float()
        z = (actions.to(head.dtype) - head) * torch.exp(-log_std)
        per_action = -0.5 * z * z - log_std - _LOG_SQRT_2PI
        if log_prob_weights:
            log_prob = sum((per_action[:, i] * w for i, w in enumerate(log_prob_weights) if w != 0.0),
                           per_action.new_zeros(head.shape[0]))
        else:
            log_prob = per_action.sum(-1)
        per_dim = 0.5 + _LOG_SQRT_2PI + log_std
        if entropy_weights:
            total = sum((per_dim[i] * w for i, w in enumerate(entropy_weights) if w != 0.0), per_dim.new_zeros(()))
            entropy = total.expand(head.shape[0])
        else:
            entropy = per_dim.sum().expand(head.shape[0])
        return log_prob, entropy

    def draw_noise(self, batch: int, generator: torch.Generator | None = None,
                   device: torch.device | str | None = None) -> Tensor:
        """The random numbers :meth:`act` samples ``batch`` actions with: uniforms ``[batch,
        num_logits]`` (Gumbel-max, discrete) or standard normals ``[batch, A]`` (continuous),
        from ``generator``. Drawn apart from the forward so a compiled decision step can take
        them as an input (a generator cannot be traced); :meth:`act` draws them itself when
        none are given, the same numbers either way."""
        device = self.obs_norm.mean.device if device is None else device
        if self.log_std is None:
            return torch.rand(batch, sum(self._splits), device=device, generator=generator)
        return torch.randn(batch, self.action_spec.dim, device=device, generator=generator)

    def _sample(self, head: Tensor, deterministic: bool, noise: Tensor | None) -> Tensor:
        if self.log_std is None:
            parts = []
            offset = 0
            for logits in torch.split(head, self._splits, dim=-1):
                if deterministic:
                    parts.append(logits.argmax(-1))
                else:
                    # Gumbel-max: argmax(logits + Gumbel noise) samples the categorical exactly.
                    assert noise is not None
                    u = noise[:, offset:offset + logits.shape[-1]].clamp(1e-20, 1.0)
                    parts.append((logits - torch.log(-torch.log(u))).argmax(-1))
                offset += logits.shape[-1]
            return torch.stack(parts, dim=-1)
        if deterministic:
            return head
        assert noise is not None
        return head + noise * torch.exp(self.log_std.float())

    # ------------------------------------------------------------------ public API
    @torch.no_grad()
    def act(self, obs: Tensor, deterministic: bool = False,
            generator: torch.Generator | None = None,
            noise: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Choose actions for ``obs [B, D]``, sampling with ``noise`` (see :meth:`draw_noise`)
        or, when none is given, with noise drawn from ``generator`` (default: PyTorch's).

        Returns ``(actions [B, A], log_prob [B], value [B])``; actions are int64 indices for the
        discrete kinds and float (unclipped; the environment clips) for continuous. With
        ``deterministic`` the mode is taken (log_prob is still that of the chosen action).
        """
        head, value = self.forward(obs)
        if noise is None and not deterministic:
            noise = self.draw_noise(obs.shape[0], generator, obs.device)
        actions = self._sample(head, deterministic, noise)
        log_prob, _ = self._log_prob_entropy(head, actions)
        return actions, log_prob, value

    @torch.no_grad()
    def act_only(self, obs: Tensor, deterministic: bool = False,
                 generator: torch.Generator | None = None, noise: Tensor | None = None) -> Tensor:
        """The actions of :meth:`act` alone ``[B, A]``, the same for the same ``noise`` or
        ``generator`` state (the same random numbers are drawn), without the critic's pass and
        the log-probability: all an opponent or a teacher needs, at about half the work of a
        small network's :meth:`act` (bench/RESULTS.md, "Opponents that only choose")."""
        head = self.policy_head(obs)
        if noise is None and not deterministic:
            noise = self.draw_noise(obs.shape[0], generator, obs.device)
        return self._sample(head, deterministic, noise)

    def evaluate(self, obs: Tensor, actions: Tensor,
                 entropy_weights: tuple[float, ...] = ()) -> tuple[Tensor, Tensor, Tensor]:
        """Log-probability, entropy and value of given ``actions [B, A]`` at ``obs [B, D]``
        (differentiable), each ``[B]``; the entropy summed over the action components, each
        weighted by ``entropy_weights`` where given (one per component)."""
        self._check_actions(obs, actions)
        head, value = self.forward(obs)
        log_prob, entropy = self._log_prob_entropy(head, actions, entropy_weights)
        return log_prob, entropy, value

    def evaluate_with_teacher(self, obs: Tensor, actions: Tensor, teacher_actions: Tensor,
                              entropy_weights: tuple[float, ...] = (),
                              teacher_weights: tuple[float, ...] = ()) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """:meth:`evaluate` and, from the same forward pass, the log-probability ``[B]`` of a
        teacher's ``teacher_actions [B, A]`` at ``obs`` (differentiable): the sum over the
        action components, each weighted by ``teacher_weights`` where given (one per
        component; a 0 leaves that component to the returns alone)."""
        if teacher_actions.shape != actions.shape:
            raise ValueError(f"teacher_actions must have the shape of actions {tuple(actions.shape)}, "
                             f"got {tuple(teacher_actions.shape)}")
        if teacher_weights and len(teacher_weights) != self.action_spec.dim:
            raise ValueError(f"teacher_weights needs {self.action_spec.dim} values (one per action "
                             f"component), got {len(teacher_weights)}")
        self._check_actions(obs, actions)
        head, value = self.forward(obs)
        log_prob, entropy = self._log_prob_entropy(head, actions, entropy_weights)
        teacher_log_prob, _ = self._log_prob_entropy(head, teacher_actions, (0.0,) * self.action_spec.dim,
                                                     teacher_weights)
        return log_prob, entropy, value, teacher_log_prob

    @torch.no_grad()
    def get_value(self, obs: Tensor) -> Tensor:
        """State value of ``obs [B, D]`` as ``[B]``."""
        if self.mirror is not None:
            return self.forward(obs)[1]
        x = self._features(self._check_obs(obs))
        return self.critic(x).squeeze(-1).float()

    def update_obs_norm(self, obs: Tensor, sync: bool = True) -> None:
        """Merge ``obs [..., D]`` into the running observation statistics (all-reduced over ranks
        under data parallel when ``sync``); a no-op when normalization is off."""
        if self.normalize_obs:
            self.obs_norm.update(obs, sync=sync)
