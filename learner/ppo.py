"""PPO: clipped surrogate on behaviour log-probs, clipped value loss, entropy bonus, minibatch
epochs, gradient clipping, learning-rate annealing and optional V-trace targets.

The update's hot loop keeps every per-minibatch statistic on the device and reads them back
once at the end (one host synchronization per update, two per epoch with ``target_kl``, one
more while a kickstarting teacher is asked: its answer's range check, :mod:`learner.teacher`). Its
working tensors (advantages, returns, shuffle order, minibatch buffers, the gradient all-reduce
buffer) are allocated once per batch shape and reused.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from learner.advantages import compute_gae, compute_vtrace
from learner.batch import RolloutBatch
from learner.distributed import GradientAllReducer, all_reduce_mean_, broadcast_module, rank
from learner.network import ActorCritic
from learner.ppo_config import PPOConfig
from learner.spaces import ActionSpec
from learner.teacher import Teacher, checked_answer

_STAT_NAMES = ("loss_policy", "loss_value", "entropy", "approx_kl", "clip_fraction", "grad_norm", "loss_teacher")
_LOSS_STATS = 5
"""The statistics the minibatch loss returns first, in ``_STAT_NAMES``' order (then the
gradient norm, then the teacher's term)."""

@dataclass
class _Workspace:
    """Preallocated tensors for one batch shape (T, B)."""

    advantages: Tensor
    returns: Tensor
    old_values: Tensor
    perm: Tensor
    mb_obs: Tensor
    mb_actions: Tensor
    mb_log_probs: Tensor
    mb_advantages: Tensor
    mb_returns: Tensor
    mb_values: Tensor
    stat_sum: Tensor
    epoch_kl: Tensor
    mb_teacher: Tensor
    teacher_actions: Tensor
    teacher_coef: Tensor
    mb_teacher_weight: Tensor
    teacher_weight: Tensor


class NonFiniteError(RuntimeError):
    """An update met or produced NaN/inf (rewards, values, losses, gradients or weights)."""


def _make_optimizer(params: list[torch.nn.Parameter], config: PPOConfig) -> torch.optim.Adam:
    if config.fused_adam:
        try:
            return torch.optim.Adam(params, lr=config.learning_rate, eps=config.adam_eps, fused=True)
        except (RuntimeError, TypeError, ValueError):
            pass  # this device/dtype has no fused kernel: fall back to the foreach implementation
    # foreach=None lets torch pick the multi-tensor kernel wherever the device supports it.
    return torch.optim.Adam(params, lr=config.learning_rate, eps=config.adam_eps, foreach=None)


class PPOLearner:
    """Owns the policy, its optimizer and the PPO update.

    ``obs_layout`` (e.g. ``sim.ObsLayout.metadata()``) is stored in checkpoints so a checkpoint is
    never loaded against a different observation layout. Under an initialized process group the
    parameters are broadcast from rank 0 at construction and gradients are averaged over ranks in
    every minibatch; all ranks must call :meth:`update` with batches of the same shape.

    ``teacher`` (with ``config.teacher_coef > 0``) kickstarts the policy: while its weight lasts,
    every update asks it for its actions at the batch's observations and adds the weighted
    negative log-probability the policy gives them to the loss (``loss_teacher`` in the
    statistics is that mean negative log-probability, 0 once the weight is spent).
    """

    def __init__(self, config: PPOConfig, obs_dim: int, action_spec: ActionSpec,
                 device: torch.device | str = "cpu", obs_layout: dict[str, Any] | None = None,
                 mirror: dict[str, list[Any]] | None = None, teacher: Teacher | None = None) -> None:
        if not isinstance(config, PPOConfig):
            raise ValueError(f"config must be a PPOConfig, got {type(config).__name__}")
        if config.teacher_coef > 0 and teacher is None:
            raise ValueError(f"ppo.teacher_coef is {config.teacher_coef} but no teacher was given (teacher=...)")
        if teacher is not None and not callable(teacher):
            raise ValueError(f"teacher must be a function from observations to actions, got {type(teacher).__name__}")
        self.teacher = teacher
        self._nvec = torch.tensor(action_spec.nvec if action_spec.is_discrete else [], dtype=torch.int64,
                                  device=device)
        if obs_layout is not None and not isinstance(obs_layout, dict):
            raise ValueError(f"obs_layout must be a dict (ObsLayout.metadata()) or None, got {type(obs_layout).__name__}")
        if obs_layout is not None and "size" in obs_layout and obs_layout["size"] != obs_dim:
            raise ValueError(f"obs_layout describes {obs_layout['size']} components but obs_dim is {obs_dim}")
        self.config = config
        self.device = torch.device(device)
        self.obs_layout = obs_layout
        self.action_spec = action_spec
        # Seeded initialization without disturbing the caller's global RNG stream.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            if config.mirror and mirror is None:
                raise ValueError("ppo.mirror needs the env's mirror image (mirror=...)")
            policy = ActorCritic(obs_dim, action_spec, config.hidden_sizes, config.activation,
                                 config.normalize_obs, config.obs_norm_clip,
                                 mirror if config.mirror else None)
            if config.policy_bias:
                policy.set_policy_bias(config.policy_bias)
        for name in ("entropy_weights", "teacher_weights"):
            weights = getattr(config, name)
            if weights and len(weights) != action_spec.dim:
                raise ValueError(f"{name} needs {action_spec.dim} values (one per action component), "
                                 f"got {len(weights)}")
        self.policy = policy.to(self.device)
        broadcast_module(self.policy)
        self._params = [p for p in self.policy.parameters() if p.requires_grad]
        self.optimizer = _make_optimizer(self._params, config)
        self._reducer = GradientAllReducer(self._params)
        self._generator = torch.Generator(device=self.device)
        self._generator.manual_seed(config.seed * 7919 + rank())
        self.policy_version = 0
        self._workspace: _Workspace | None = None
        self._workspace_key: tuple[int, ...] | None = None
        self._loss_fn = torch.compile(self._minibatch_loss) if config.compile else self._minibatch_loss

    # ------------------------------------------------------------------ schedule
    def learning_rate_at(self, policy_version: int) -> float:
        """Learning rate used by the update that produces version ``policy_version + 1``."""
        if not self.config.anneal_lr:
            return self.config.learning_rate
        frac = max(1.0 - policy_version / self.config.total_updates, 0.0)
        return self.config.learning_rate * frac

    def teacher_coef_at(self, policy_version: int) -> float:
        """Weight of the teacher's term in the update that produces version ``policy_version + 1``:
        ``teacher_coef`` falling linearly to ``teacher_floor`` at ``teacher_until`` of
        ``total_updates``, then held there."""
        cfg = self.config
        if self.teacher is None or cfg.teacher_coef == 0:
            return 0.0
        span = cfg.teacher_until * cfg.total_updates
        left = max(1.0 - policy_version / span, 0.0)
        return cfg.teacher_floor + (cfg.teacher_coef - cfg.teacher_floor) * left

    # ------------------------------------------------------------------ internals
    def _get_workspace(self, batch: RolloutBatch) -> _Workspace:
        t, b, d = batch.obs.shape
        a = batch.actions.shape[-1]
        n = t * b
        if n % self.config.num_minibatches != 0:
            raise ValueError(
                f"batch size T*B = {n} must be divisible by num_minibatches = {self.config.num_minibatches}"
            )
        key = (t, b, d, a)
        if self._workspace is None or self._workspace_key != key:
            m = n // self.config.num_minibatches
            dev = self.device
            f32: dict[str, Any] = {"device": dev, "dtype": torch.float32}
            self._workspace = _Workspace(
                advantages=torch.zeros(t, b, **f32), returns=torch.zeros(t, b, **f32),
                old_values=torch.zeros(t, b, **f32),
                perm=torch.zeros(n, device=dev, dtype=torch.int64),
                mb_obs=torch.zeros(m, d, **f32),
                mb_actions=torch.zeros(m, a, device=dev, dtype=batch.actions.dtype),
                mb_log_probs=torch.zeros(m, **f32), mb_advantages=torch.zeros(m, **f32),
                mb_returns=torch.zeros(m, **f32), mb_values=torch.zeros(m, **f32),
                stat_sum=torch.zeros(len(_STAT_NAMES), **f32), epoch_kl=torch.zeros((), **f32),
                mb_teacher=torch.zeros(m, a, device=dev, dtype=batch.actions.dtype),
                teacher_actions=torch.zeros(n, a, device=dev, dtype=batch.actions.dtype),
                teacher_coef=torch.zeros((), **f32),
                mb_teacher_weight=torch.zeros(m, **f32), teacher_weight=torch.zeros(n, **f32),
            )
            self._workspace_key = key
        return self._workspace

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.config.bf16 and self.device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _minibatch_loss(self, obs: Tensor, actions: Tensor, old_log_probs: Tensor, advantages: Tensor,
                        returns: Tensor, old_values: Tensor, teacher_actions: Tensor | None = None,
                        teacher_coef: Tensor | None = None, teacher_weight: Tensor | None = None
                        ) -> tuple[Tensor, Tensor]:
        cfg = self.config
        teacher_nll: Tensor | None = None
        with self._autocast():
            if teacher_actions is not None:
                new_log_probs, entropy, new_values, teacher_log_probs = self.policy.evaluate_with_teacher(
                    obs, actions, teacher_actions, cfg.entropy_weights, cfg.teacher_weights)
                teacher_lp = teacher_log_probs.float()
                teacher_nll = -(teacher_lp if teacher_weight is None else teacher_lp * teacher_weight).mean()
            elif cfg.entropy_weights:
                new_log_probs, entropy, new_values = self.policy.evaluate(obs, actions, cfg.entropy_weights)
            else:
                new_log_probs, entropy, new_values = self.policy.evaluate(obs, actions)
        log_ratio = new_log_probs.float() - old_log_probs
        ratio = log_ratio.exp()
        if cfg.normalize_advantages:
            # The std of one sample is undefined (NaN): a 1-sample minibatch is only centred.
            std = advantages.std() if advantages.numel() > 1 else torch.zeros_like(advantages[0])
            advantages = (advantages - advantages.mean()) / (std + 1e-8)
        pg_loss = torch.maximum(-advantages * ratio,
                                -advantages * ratio.clamp(1.0 - cfg.clip_coef, 1.0 + cfg.clip_coef)).mean()
        new_values = new_values.float()
        if cfg.clip_value_loss:
            clipped = old_values + (new_values - old_values).clamp(-cfg.value_clip_coef, cfg.value_clip_coef)
            v_loss = 0.5 * torch.maximum((new_values - returns) ** 2, (clipped - returns) ** 2).mean()
        else:
            v_loss = 0.5 * ((new_values - returns) ** 2).mean()
        ent = entropy.float().mean()
        loss = pg_loss - cfg.entropy_coef * ent + cfg.value_coef * v_loss
        if teacher_nll is not None and teacher_coef is not None:
            loss = loss + teacher_coef * teacher_nll
        r = ratio.detach()
        approx_kl = ((r - 1.0) - log_ratio.detach()).mean()
        clip_fraction = ((r - 1.0).abs() > cfg.clip_coef).float().mean()
        stats = torch.stack([pg_loss.detach(), v_loss.detach(), ent.detach(), approx_kl, clip_fraction,
                             teacher_nll.detach() if teacher_nll is not None else torch.zeros_like(approx_kl)])
        return loss, stats

    @torch.no_grad()
    def _targets(self, batch: RolloutBatch, ws: _Workspace) -> None:
        cfg = self.config
        values = batch.values.float()
        rewards = batch.rewards.float() * cfg.reward_scale if cfg.reward_scale != 1.0 else batch.rewards.float()
        bootstrap = batch.bootstrap_values.float()
        if not cfg.bootstrap_truncated:
            bootstrap = torch.zeros_like(bootstrap)
        if cfg.use_vtrace:
            t, b, d = batch.obs.shape
            with self._autocast():
                cur_log_probs, _, cur_values = self.policy.evaluate(
                    batch.obs.reshape(t * b, d), batch.actions.reshape(t * b, -1))
            cur_values = cur_values.float().view(t, b)
            log_rhos = cur_log_probs.float().view(t, b) - batch.log_probs.float()
            # States inside the chunk are re-valued by the current critic; the boundary values
            # (final observations and the observation after the chunk) are not in the batch, so
            # their behaviour values stand in.
            vs, pg_adv = compute_vtrace(
                log_rhos, rewards, cur_values, batch.terminated, batch.truncated,
                bootstrap, batch.next_values.float(), cfg.gamma, cfg.gae_lambda,
                cfg.vtrace_rho_clip, cfg.vtrace_c_clip)
            ws.advantages.copy_(pg_adv)
            ws.returns.copy_(vs)
            ws.old_values.copy_(cur_values)
        else:
            compute_gae(rewards, values, batch.terminated, batch.truncated,
                        bootstrap, batch.next_values.float(), cfg.gamma,
                        cfg.gae_lambda, out=ws.advantages)
            torch.add(ws.advantages, values, out=ws.returns)
            ws.old_values.copy_(values)

    @torch.no_grad()
    def _ask_teacher(self, flat_obs: Tensor, ws: _Workspace) -> None:
        """The teacher's actions (and per-sample weights) at the batch's observations, checked
        and kept in ``ws``."""
        assert self.teacher is not None
        answer = self.teacher(flat_obs if flat_obs.dtype == torch.float32 else flat_obs.float())
        actions, weight = checked_answer(answer, tuple(ws.teacher_actions.shape), self.action_spec, self._nvec)
        ws.teacher_actions.copy_(actions)
        if weight is None:
            ws.teacher_weight.fill_(1.0)
        else:
            ws.teacher_weight.copy_(weight)

    # ------------------------------------------------------------------ public API
    def update(self, batch: RolloutBatch) -> dict[str, float]:
        """One PPO update on ``batch``; bumps :attr:`policy_version` and returns statistics.

        Keys: ``loss_policy``, ``loss_value``, ``entropy``, ``approx_kl``, ``clip_fraction``,
        ``grad_norm`` (minibatch means over the epochs run), ``explained_variance``,
        ``learning_rate``, ``epochs``, ``policy_lag_mean``, ``policy_lag_max``, ``value_mean``,
        ``return_mean``, ``advantage_std``, ``samples``, ``policy_version``, and with a teacher
        ``loss_teacher``, ``teacher_coef`` and ``teacher_asked`` (the mean of its per-sample
        weights: the share of the batch it was asked at).
        """
        if not isinstance(batch, RolloutBatch):
            raise ValueError(f"batch must be a RolloutBatch, got {type(batch).__name__}")
        if batch.device != self.device:
            batch = batch.to(self.device, non_blocking=True)
        batch.validate(self.policy.obs_dim, self.action_spec.dim)
        if self.action_spec.is_discrete and batch.actions.dtype != torch.int64:
            raise ValueError(f"actions must be int64 for a {self.action_spec.kind} policy, got {batch.actions.dtype}")
        cfg = self.config
        lr = self.learning_rate_at(self.policy_version)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        ws = self._get_workspace(batch)
        t, b, d = batch.obs.shape
        n = t * b
        m = n // cfg.num_minibatches
        if cfg.normalize_obs and cfg.update_obs_norm:
            self.policy.update_obs_norm(batch.obs)
        self._targets(batch, ws)

        flat_obs = batch.obs.reshape(n, d)
        flat_actions = batch.actions.reshape(n, -1)
        flat_log_probs = batch.log_probs.reshape(n)
        flat_adv, flat_ret, flat_val = ws.advantages.view(n), ws.returns.view(n), ws.old_values.view(n)
        teacher_coef = self.teacher_coef_at(self.policy_version)
        if teacher_coef > 0:
            self._ask_teacher(flat_obs, ws)
            ws.teacher_coef.fill_(teacher_coef)
        obs_f32 = flat_obs.dtype == torch.float32
        lp_f32 = flat_log_probs.dtype == torch.float32
        ws.stat_sum.zero_()
        epochs_run = 0
        for _epoch in range(cfg.update_epochs):
            torch.randperm(n, generator=self._generator, out=ws.perm)
            ws.epoch_kl.zero_()
            for i in range(cfg.num_minibatches):
                idx = ws.perm[i * m:(i + 1) * m]
                if obs_f32:
                    torch.index_select(flat_obs, 0, idx, out=ws.mb_obs)
                else:
                    ws.mb_obs.copy_(flat_obs.index_select(0, idx))
                torch.index_select(flat_actions, 0, idx, out=ws.mb_actions)
                if lp_f32:
                    torch.index_select(flat_log_probs, 0, idx, out=ws.mb_log_probs)
                else:
                    ws.mb_log_probs.copy_(flat_log_probs.index_select(0, idx))
                torch.index_select(flat_adv, 0, idx, out=ws.mb_advantages)
                torch.index_select(flat_ret, 0, idx, out=ws.mb_returns)
                torch.index_select(flat_val, 0, idx, out=ws.mb_values)
                if teacher_coef > 0:
                    torch.index_select(ws.teacher_actions, 0, idx, out=ws.mb_teacher)
                    torch.index_select(ws.teacher_weight, 0, idx, out=ws.mb_teacher_weight)
                    loss, stats = self._loss_fn(ws.mb_obs, ws.mb_actions, ws.mb_log_probs, ws.mb_advantages,
                                                ws.mb_returns, ws.mb_values, ws.mb_teacher, ws.teacher_coef,
                                                ws.mb_teacher_weight)
                else:
                    loss, stats = self._loss_fn(ws.mb_obs, ws.mb_actions, ws.mb_log_probs,
                                                ws.mb_advantages, ws.mb_returns, ws.mb_values)
                self.optimizer.zero_grad(set_to_none=False)
                loss.backward()
                self._reducer.all_reduce()
                grad_norm = torch.nn.utils.clip_grad_norm_(self._params, cfg.max_grad_norm)
                self.optimizer.step()
                ws.stat_sum[:_LOSS_STATS].add_(stats[:_LOSS_STATS])
                ws.stat_sum[_LOSS_STATS].add_(grad_norm)
                ws.stat_sum[_LOSS_STATS + 1].add_(stats[_LOSS_STATS])
                ws.epoch_kl.add_(stats[3])
            epochs_run += 1
            if cfg.target_kl is not None:
                # All ranks must agree on stopping, or their collectives would fall out of step.
                kl = all_reduce_mean_(ws.epoch_kl.clone()).item() / cfg.num_minibatches
                if kl > cfg.target_kl:
                    break
        self.policy_version += 1

        with torch.no_grad():
            values = batch.values.float()
            var_ret = ws.returns.var()
            explained = torch.where(var_ret > 0, 1.0 - (ws.returns - values).var() / var_ret,
                                    torch.full_like(var_ret, float("nan")))
            lag = (self.policy_version - 1 - batch.policy_versions).float()
            asked = ws.teacher_weight.mean() if teacher_coef > 0 else torch.zeros_like(var_ret)
            tail = torch.stack([explained, lag.mean(), lag.max(), values.mean(), ws.returns.mean(),
                                ws.advantages.std(), asked])
            # Read back with the statistics (no extra sync): are the batch and weights finite?
            finite = torch.stack([batch.rewards.isfinite().all(), batch.values.isfinite().all(),
                                  batch.obs.isfinite().all(),
                                  torch.stack([p.isfinite().all() for p in self._params]).all()])
            summary = torch.cat([ws.stat_sum / (epochs_run * cfg.num_minibatches), tail,
                                 finite.float()]).tolist()
        checks = dict(zip(("rewards of the batch", "behaviour values of the batch",
                           "observations of the batch", "weights after the update"),
                          summary[-4:], strict=True))
        summary = summary[:-4]
        out = dict(zip(_STAT_NAMES, summary[:len(_STAT_NAMES)], strict=True))
        out.update(zip(("explained_variance", "policy_lag_mean", "policy_lag_max", "value_mean",
                        "return_mean", "advantage_std", "teacher_asked"), summary[len(_STAT_NAMES):], strict=True))
        out.update(learning_rate=lr, teacher_coef=teacher_coef, epochs=float(epochs_run), samples=float(n),
                   policy_version=float(self.policy_version))
        bad = [name for name, ok in checks.items() if ok != 1.0]
        bad += [name for name in ("loss_policy", "loss_value", "entropy", "grad_norm")
                if not math.isfinite(out[name])]
        if bad:
            raise NonFiniteError(f"PPO update {self.policy_version}: non-finite {', '.join(bad)}; "
                                 "these weights are not published")
        return out
