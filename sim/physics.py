"""Pure tensor functions of the model: the aero law, proportional navigation, the swept hit test.

Vectors are carried as separate x and y tensors of any (broadcastable) shape, so every function
is a short chain of elementwise ops that ``torch.compile`` fuses into one kernel.
"""

from __future__ import annotations

import torch

from sim.config import AeroParams

MIN_SQUARED = 1e-6
"""Floor for squared norms used as divisors (ranges, speeds)."""


def aero_step(
    px: torch.Tensor,
    py: torch.Tensor,
    vx: torch.Tensor,
    vy: torch.Tensor,
    rudder: torch.Tensor,
    thrust: torch.Tensor,
    aero: AeroParams,
    dt: torch.Tensor | float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One physics step of sim.md's law with the turn taken exactly.

    Rotates the heading by ``ω·dt`` (``ω = V·c·δ``), changes the speed by ``a_t·dt`` along the
    new heading, then moves with the new velocity. ``dt`` may be a per-element tensor (0 freezes
    an element). Returns the new ``px, py, vx, vy``.
    """
    c = aero.lift_factor
    speed = torch.sqrt(vx * vx + vy * vy)
    inv = torch.rsqrt(torch.clamp(vx * vx + vy * vy, min=1e-12))  # |v| floored at 1e-6
    nx, ny = vx * inv, vy * inv
    angle = speed * (c * dt) * rudder
    ca, sa = torch.cos(angle), torch.sin(angle)
    nx2 = nx * ca - ny * sa
    ny2 = nx * sa + ny * ca
    lift = rudder.abs() * c
    drag = (aero.cd0 + aero.induced_drag_factor * lift * lift) * speed * speed
    speed2 = speed + (thrust - drag) * dt
    vx2, vy2 = nx2 * speed2, ny2 * speed2
    return px + vx2 * dt, py + vy2 * dt, vx2, vy2


def pn_rudder(
    rx: torch.Tensor,
    ry: torch.Tensor,
    wx: torch.Tensor,
    wy: torch.Tensor,
    vx: torch.Tensor,
    vy: torch.Tensor,
    nav_constant: float,
    aero: AeroParams,
) -> torch.Tensor:
    """True proportional navigation from the current state.

    ``r`` is target minus missile position, ``w`` target minus missile velocity, ``v`` the
    missile's velocity. ``a_cmd = N · Vc · λ̇``, rudder ``clamp(a_cmd / (V² · c), −1, 1)``.
    """
    r2 = torch.clamp(rx * rx + ry * ry, min=MIN_SQUARED)
    lam_dot = (rx * wy - ry * wx) / r2
    closing = -(rx * wx + ry * wy) * torch.rsqrt(r2)
    a_cmd = nav_constant * closing * lam_dot
    v2 = torch.clamp(vx * vx + vy * vy, min=MIN_SQUARED)
    return torch.clamp(a_cmd / (v2 * aero.lift_factor), -1.0, 1.0)


def swept_min_dist2(
    d0x: torch.Tensor, d0y: torch.Tensor, d1x: torch.Tensor, d1y: torch.Tensor
) -> torch.Tensor:
    """Squared closest approach of a relative position moving linearly from ``d0`` to ``d1``.

    A test only at the step's end lets a fast missile tunnel through its target; this one
    catches every pass within the step.
    """
    ex, ey = d1x - d0x, d1y - d0y
    ee = ex * ex + ey * ey
    s = torch.where(ee < 1e-12, torch.zeros_like(ee), -(d0x * ex + d0y * ey) / torch.clamp(ee, min=1e-12))
    s = torch.clamp(s, 0.0, 1.0)
    cx, cy = d0x + s * ex, d0y + s * ey
    return cx * cx + cy * cy
