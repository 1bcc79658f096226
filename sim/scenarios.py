"""Initial conditions, drawn per environment from a counter-based hash.

A draw is a pure function of ``(seed, env_index, episode_index, draw_index)``: no generator
state, so a masked reset never disturbs another environment, the same seed gives the same
episodes at any batch size and on any device, and the draw fuses into compiled graphs.

The hash is Wellons' *lowbias32*, computed with 32-bit results kept in int64 (multiplications
split so nothing overflows). Uniforms take the top 24 bits, exact in float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from sim.config import SimConfig

_MASK32 = 0xFFFFFFFF
_C1 = 0x7FEB352D
_C2 = 0x846CA68B

# Draw indices, one per random quantity of the random scenario.
DRAW_SEPARATION, DRAW_RED_JITTER, DRAW_BLUE_JITTER, DRAW_RED_SPEED, DRAW_BLUE_SPEED = range(5)
DRAW_ROTATION, DRAW_SHIFT_X, DRAW_SHIFT_Y = 5, 6, 7
NUM_DRAWS = 8
DRAW_RED_PARTIAL, DRAW_BLUE_PARTIAL, DRAW_RED_AMMO, DRAW_BLUE_AMMO = 8, 9, 10, 11
"""Draws of ``spawn_partial_ammo``, made only when it is on (the positions' draws above do not
depend on them, so turning it on changes no start's geometry)."""
DRAW_WIDE = 12
"""The draw of ``spawn_wide``, made only when it is on: a start whose draw is under it is shifted
by up to ``wide_shift_m`` instead of ``spawn_shift_m`` (the same two shift draws, scaled), and
every other start is the one it would be with it off."""



def _mul32(x: int, c: int) -> int:
    return (x * c) & _MASK32


def hash32(x: int) -> int:
    """lowbias32 on a Python int (taken modulo 2³²)."""
    x &= _MASK32
    x ^= x >> 16
    x = _mul32(x, _C1)
    x ^= x >> 15
    x = _mul32(x, _C2)
    x ^= x >> 16
    return x


def uniform(seed: int, env_index: int, episode_index: int, draw_index: int) -> float:
    """One U[0, 1) draw as a Python float (the scalar twin of :func:`uniform_batch`)."""
    h = hash32(seed)
    h = hash32(h ^ (env_index & _MASK32))
    h = hash32(h ^ (episode_index & _MASK32))
    h = hash32(h ^ (draw_index & _MASK32))
    return (h >> 8) / float(1 << 24)


def _mul32_t(x: torch.Tensor, c: int) -> torch.Tensor:
    lo, hi = c & 0xFFFF, c >> 16
    return (x * lo + (((x * hi) & 0xFFFF) << 16)) & _MASK32


def hash32_t(x: torch.Tensor) -> torch.Tensor:
    """lowbias32 on an int64 tensor of values in [0, 2³²)."""
    x = x ^ (x >> 16)
    x = _mul32_t(x, _C1)
    x = x ^ (x >> 15)
    x = _mul32_t(x, _C2)
    return x ^ (x >> 16)


def uniform_batch(
    seed: int, env_index: torch.Tensor, episode_index: torch.Tensor, draw_index: int
) -> torch.Tensor:
    """U[0, 1) draws (float64) for int64 tensors of environment and episode indices."""
    h = hash32_t((env_index & _MASK32) ^ hash32(seed))
    h = hash32_t(h ^ (episode_index & _MASK32))
    h = hash32_t(h ^ (draw_index & _MASK32))
    return (h >> 8).to(torch.float64) / float(1 << 24)


def uniforms_batch(
    seed: int, env_index: torch.Tensor, episode_index: torch.Tensor, num_draws: int, dtype: torch.dtype,
    first: int = 0,
) -> torch.Tensor:
    """Draws ``first`` to ``first + num_draws − 1`` at once, ``[M, num_draws]`` in ``dtype``
    (exact: 24-bit values)."""
    h = hash32_t((env_index & _MASK32) ^ hash32(seed))
    h = hash32_t(h ^ (episode_index & _MASK32)).unsqueeze(-1)
    draws = torch.arange(first, first + num_draws, dtype=torch.int64, device=env_index.device)
    h = hash32_t(h ^ draws)
    return (h >> 8).to(dtype) * (1.0 / float(1 << 24))


@dataclass
class InitialConditions:
    """Per-side positions, headings and speeds of one environment's new episode."""

    red_pos: tuple[float, float]
    red_heading_rad: float
    red_speed_mps: float
    blue_pos: tuple[float, float]
    blue_heading_rad: float
    blue_speed_mps: float
    red_ammo: int | None = None
    """Missiles red starts with; None: ``missiles_per_fighter``."""
    blue_ammo: int | None = None
    """Missiles blue starts with; None: ``missiles_per_fighter``."""


def _lerp(lo_hi: tuple[float, float], u: float) -> float:
    return lo_hi[0] + (lo_hi[1] - lo_hi[0]) * u


def _start_ammo(config: SimConfig, u_partial: float, u_count: float) -> int:
    """One side's missiles at the start (``spawn_partial_ammo``) from its two uniform draws."""
    full = config.missiles_per_fighter
    return min(int(u_count * full), full - 1) if u_partial < config.spawn_partial_ammo else full


def initial_conditions(
    config: SimConfig, seed: int, env_index: int, episode_index: int
) -> InitialConditions:
    """The scalar twin of :func:`initial_conditions_batch`, for the reference and tools."""
    if config.scenario == "head_on":
        half = config.head_on_separation_m / 2
        v = config.head_on_speed_mps
        return InitialConditions((-half, 0.0), 0.0, v, (half, 0.0), math.pi, v)

    def u(k: int) -> float:
        return uniform(seed, env_index, episode_index, k)

    sep = _lerp(config.spawn_separation_m, u(DRAW_SEPARATION))
    jit = config.spawn_heading_jitter_rad
    red_h = (2 * u(DRAW_RED_JITTER) - 1) * jit
    blue_h = math.pi + (2 * u(DRAW_BLUE_JITTER) - 1) * jit
    red_v = _lerp(config.spawn_speed_mps, u(DRAW_RED_SPEED))
    blue_v = _lerp(config.spawn_speed_mps, u(DRAW_BLUE_SPEED))
    rot = 2 * math.pi * u(DRAW_ROTATION)
    wide = config.spawn_wide > 0 and u(DRAW_WIDE) < config.spawn_wide
    shift = config.wide_shift_m if wide else config.spawn_shift_m
    cx = (2 * u(DRAW_SHIFT_X) - 1) * shift
    cy = (2 * u(DRAW_SHIFT_Y) - 1) * shift
    c, s = math.cos(rot), math.sin(rot)
    half = sep / 2
    red = (cx + c * -half, cy + s * -half)
    blue = (cx + c * half, cy + s * half)
    red_ammo = blue_ammo = None
    if config.spawn_partial_ammo > 0:
        red_ammo, blue_ammo = (_start_ammo(config, u(DRAW_RED_PARTIAL + side), u(DRAW_RED_AMMO + side))
                               for side in (0, 1))
    return InitialConditions(red, red_h + rot, red_v, blue, blue_h + rot, blue_v, red_ammo, blue_ammo)


def initial_conditions_batch(
    config: SimConfig,
    seed: int,
    env_index: torch.Tensor,
    episode_index: torch.Tensor,
    dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Positions ``[M, 2, 2]``, headings ``[M, 2]`` and speeds ``[M, 2]`` in ``dtype`` for
    environments ``env_index`` at episodes ``episode_index`` (both int64 ``[M]``)."""
    m = env_index.shape[0]
    dev = env_index.device
    if config.scenario == "head_on":
        # Built with fills, not from host data, so it is safe inside CUDA graph capture.
        half_sep = config.head_on_separation_m / 2
        side = torch.arange(2, device=dev).to(dtype).expand(m, 2)  # 0 red, 1 blue
        pos = torch.stack([(2 * side - 1) * half_sep, torch.zeros_like(side)], dim=-1)
        heading = side * math.pi
        speed = torch.full((m, 2), config.head_on_speed_mps, dtype=dtype, device=dev)
        return pos, heading, speed

    draws = uniforms_batch(seed, env_index, episode_index, NUM_DRAWS, dtype)

    def u(k: int) -> torch.Tensor:
        return draws[:, k]

    lo, hi = config.spawn_separation_m
    sep = lo + (hi - lo) * u(DRAW_SEPARATION)
    jit = config.spawn_heading_jitter_rad
    red_h = (2 * u(DRAW_RED_JITTER) - 1) * jit
    blue_h = math.pi + (2 * u(DRAW_BLUE_JITTER) - 1) * jit
    vlo, vhi = config.spawn_speed_mps
    red_v = vlo + (vhi - vlo) * u(DRAW_RED_SPEED)
    blue_v = vlo + (vhi - vlo) * u(DRAW_BLUE_SPEED)
    rot = 2 * math.pi * u(DRAW_ROTATION)
    shift: torch.Tensor | float = config.spawn_shift_m
    if config.spawn_wide > 0:
        wide = uniforms_batch(seed, env_index, episode_index, 1, dtype, first=DRAW_WIDE)[:, 0]
        shift = torch.where(wide < config.spawn_wide, config.wide_shift_m, config.spawn_shift_m)
    cx = (2 * u(DRAW_SHIFT_X) - 1) * shift
    cy = (2 * u(DRAW_SHIFT_Y) - 1) * shift
    c, s = torch.cos(rot), torch.sin(rot)
    half = sep / 2
    pos = torch.stack(
        [torch.stack([cx - c * half, cy - s * half], -1), torch.stack([cx + c * half, cy + s * half], -1)],
        dim=1,
    )
    heading = torch.stack([red_h + rot, blue_h + rot], dim=-1)
    speed = torch.stack([red_v, blue_v], dim=-1)
    return pos, heading, speed


def initial_ammo_batch(
    config: SimConfig, seed: int, env_index: torch.Tensor, episode_index: torch.Tensor
) -> torch.Tensor:
    """Missiles each side starts with, int64 ``[M, 2]`` (``spawn_partial_ammo``; the scalar twin
    is in :func:`initial_conditions`). Every side starts full when it is 0 or the scenario is
    ``head_on``."""
    m, dev = env_index.shape[0], env_index.device
    full = config.missiles_per_fighter
    if config.spawn_partial_ammo <= 0 or config.scenario == "head_on":
        return torch.full((m, 2), full, dtype=torch.int64, device=dev)
    draws = uniforms_batch(seed, env_index, episode_index, 4, torch.float64, first=DRAW_RED_PARTIAL)
    partial = draws[:, :2] < config.spawn_partial_ammo  # DRAW_RED_PARTIAL, DRAW_BLUE_PARTIAL
    fewer = (draws[:, 2:] * full).to(torch.int64).clamp(max=full - 1)  # DRAW_RED_AMMO, DRAW_BLUE_AMMO
    return torch.where(partial, fewer, torch.full_like(fewer, full))
