"""Advantage estimation over ``[T, B]`` on the data's device: GAE and V-trace.

Both loop over time only (a recursion), never over environments. At an episode end the next
state's value is 0 where terminated and ``bootstrap_values`` (the value of the final
observation) where truncated, and the recursion does not cross into the next episode.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _next_state_values(values: Tensor, next_values: Tensor, terminated: Tensor, truncated: Tensor,
                       bootstrap_values: Tensor) -> tuple[Tensor, Tensor]:
    """(value of the state after step t ``[T, B]``, continue flag ``[T, B]`` float)."""
    following = torch.cat([values[1:], next_values.unsqueeze(0)], dim=0)
    done = terminated | truncated
    after = torch.where(truncated, bootstrap_values, following)
    after = torch.where(terminated, torch.zeros_like(after), after)
    return after, (~done).to(values.dtype)


def compute_gae(rewards: Tensor, values: Tensor, terminated: Tensor, truncated: Tensor,
                bootstrap_values: Tensor, next_values: Tensor, gamma: float, lam: float,
                out: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Generalized advantage estimates and returns.

    Args: rewards, values, bootstrap_values ``[T, B]`` float; terminated, truncated ``[T, B]``
    bool; next_values ``[B]``; ``out`` an optional preallocated ``[T, B]`` tensor for the
    advantages. Returns ``(advantages [T, B], returns [T, B])`` with returns = advantages + values.
    A step both terminated and truncated counts as terminated.
    """
    _check_shapes(rewards, values, terminated, truncated, bootstrap_values, next_values)
    after, cont = _next_state_values(values, next_values, terminated, truncated, bootstrap_values)
    deltas = rewards + gamma * after - values
    decay = (gamma * lam) * cont
    adv = out if out is not None else torch.empty_like(values)
    last = torch.zeros_like(next_values, dtype=values.dtype)
    for t in range(rewards.shape[0] - 1, -1, -1):
        last = deltas[t] + decay[t] * last
        adv[t] = last
    return adv, adv + values


def compute_vtrace(log_rhos: Tensor, rewards: Tensor, values: Tensor, terminated: Tensor,
                   truncated: Tensor, bootstrap_values: Tensor, next_values: Tensor, gamma: float,
                   lam: float = 1.0, rho_clip: float = 1.0, c_clip: float = 1.0) -> tuple[Tensor, Tensor]:
    """V-trace value targets and policy-gradient advantages (Espeholt et al., 2018).

    ``log_rhos [T, B]`` is log π(a|s) − log μ(a|s) (target minus behaviour). ``values``,
    ``bootstrap_values`` and ``next_values`` should come from the current value function.
    Returns ``(vs [T, B], pg_advantages [T, B])`` with
    ``vs_t = V_t + δ_t + γ c_t (vs_{t+1} − V_{t+1})``, ``δ_t = ρ_t (r_t + γ V_{t+1} − V_t)``,
    ``pg_adv_t = ρ_t (r_t + γ vs_{t+1} − V_t)``, ``ρ_t = min(ρ̄, e^{log_rho})``,
    ``c_t = λ min(c̄, e^{log_rho})``; at an episode end ``vs_{t+1}`` is the (bootstrap or zero)
    value of the final observation and the trace stops.
    """
    _check_shapes(rewards, values, terminated, truncated, bootstrap_values, next_values)
    if log_rhos.shape != rewards.shape:
        raise ValueError(f"log_rhos must have shape {tuple(rewards.shape)}, got {tuple(log_rhos.shape)}")
    ratio = torch.exp(log_rhos.to(values.dtype))
    rho = ratio.clamp(max=rho_clip)
    c = lam * ratio.clamp(max=c_clip)
    after, cont = _next_state_values(values, next_values, terminated, truncated, bootstrap_values)
    deltas = rho * (rewards + gamma * after - values)
    decay = gamma * c * cont
    vs_minus_v = torch.empty_like(values)
    last = torch.zeros_like(next_values, dtype=values.dtype)
    for t in range(rewards.shape[0] - 1, -1, -1):
        last = deltas[t] + decay[t] * last
        vs_minus_v[t] = last
    vs = vs_minus_v + values
    # vs of the state after step t: the next row's vs within an episode, else the plain value.
    vs_following = torch.cat([vs[1:], next_values.unsqueeze(0).to(values.dtype)], dim=0)
    vs_after = torch.where(cont.bool(), vs_following, after)
    pg_adv = rho * (rewards + gamma * vs_after - values)
    return vs, pg_adv


def _check_shapes(rewards: Tensor, values: Tensor, terminated: Tensor, truncated: Tensor,
                  bootstrap_values: Tensor, next_values: Tensor) -> None:
    if rewards.dim() != 2:
        raise ValueError(f"rewards must have shape (T, B), got {tuple(rewards.shape)}")
    shape = tuple(rewards.shape)
    for name, x in (("values", values), ("terminated", terminated), ("truncated", truncated),
                    ("bootstrap_values", bootstrap_values)):
        if tuple(x.shape) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {tuple(x.shape)}")
    if tuple(next_values.shape) != shape[1:]:
        raise ValueError(f"next_values must have shape ({shape[1]},), got {tuple(next_values.shape)}")
    if terminated.dtype != torch.bool or truncated.dtype != torch.bool:
        raise ValueError(f"terminated and truncated must be bool, got {terminated.dtype}, {truncated.dtype}")
