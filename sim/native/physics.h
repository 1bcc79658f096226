// One physics step of a block (sim/RULES.md, the torch path's sim/kernels.py): launches, the
// exact-turn aerodynamics of fighters and missiles, proportional navigation, the swept hit test,
// missile loss and the outcome.

#pragma once

#include "lanes.h"
#include "params.h"
#include "state.h"

namespace {

// sim.md's exact-turn law for one body (the torch path's aero_step).
template <typename V, typename T>
inline void aero_step(V& px, V& py, V& vx, V& vy, V rudder, V thrust, T cd0, T k, T c, T cdt, T dt) {
  const V speed = vsqrt(vx * vx + vy * vy);
  const V inv = T(1) / (speed > T(1e-6) ? speed : T(1e-6));  // |v| floored for the direction only
  const V nx = vx * inv, ny = vy * inv;
  V sa, ca;
  vsincos(speed * cdt * rudder, sa, ca);
  const V nx2 = nx * ca - ny * sa;
  const V ny2 = nx * sa + ny * ca;
  const V lift = (rudder < T(0) ? -rudder : rudder) * c;
  const V drag = (cd0 + k * lift * lift) * speed * speed;
  const V speed2 = speed + (thrust - drag) * dt;
  vx = nx2 * speed2;
  vy = ny2 * speed2;
  px = px + vx * dt;
  py = py + vy * dt;
}

// ------------------------------------------------------------------ one physics step

template <typename T>
void physics_step(Block<T>& b, const Params<T>& P) {
  typedef typename Lanes<T>::V V;
  typedef typename Lanes<T>::I I;
  const int M = P.slots;
  const I zero_i = {};
  const V zero = {};
  // 1. Launch: the lowest free slot of each side whose fighter may fire.
  for (int s = 0; s < 2; ++s) {
    I first = zero_i - 1;
    for (int k = M - 1; k >= 0; --k) first = b.mact[s][k] ? first : (zero_i + k);
    const I launch = b.ffire[s] & b.falive[s] & (b.fammo[s] > 0) & (b.fsince[s] >= P.cooldown) &
                     (first >= 0) & b.live;
    if (!any_of(launch)) continue;
    const V v2 = b.fvx[s] * b.fvx[s] + b.fvy[s] * b.fvy[s];
    const V off = P.launch_offset / vsqrt(v2 > T(1e-12) ? v2 : T(1e-12));
    for (int k = 0; k < M; ++k) {
      const I now = launch & (first == k);
      if (!any_of(now)) continue;
      b.mact[s][k] = now ? now : b.mact[s][k];
      b.mpx[s][k] = now ? b.fpx[s] + b.fvx[s] * off : b.mpx[s][k];
      b.mpy[s][k] = now ? b.fpy[s] + b.fvy[s] * off : b.mpy[s][k];
      b.mvx[s][k] = now ? b.fvx[s] : b.mvx[s][k];
      b.mvy[s][k] = now ? b.fvy[s] : b.mvy[s][k];
      b.mrud[s][k] = now ? T(0) : b.mrud[s][k];
      b.msteps[s][k] = now ? zero_i : b.msteps[s][k];
    }
    b.launches[s] -= launch;
    b.fammo[s] += launch;
    b.fsince[s] = launch ? zero_i : b.fsince[s];
    b.ffire[s] = launch ? zero_i : b.ffire[s];
  }

  // Start-of-step fighters: the guidance target and the hit sweep's start.
  V tpx0[2], tpy0[2], tvx0[2], tvy0[2];
  I alive0[2];
  for (int s = 0; s < 2; ++s) {
    tpx0[s] = b.fpx[s]; tpy0[s] = b.fpy[s]; tvx0[s] = b.fvx[s]; tvy0[s] = b.fvy[s];
    alive0[s] = b.falive[s];
  }

  // 3. Fighters (frozen when dead or the episode ended in this decision).
  for (int s = 0; s < 2; ++s) {
    V px = b.fpx[s], py = b.fpy[s], vx = b.fvx[s], vy = b.fvy[s];
    aero_step(px, py, vx, vy, b.frud[s], b.fthr[s] * P.f_thrust, P.f_cd0, P.f_k, P.f_c, P.f_cdt, P.dt);
    const I move = b.falive[s] & b.live;
    b.fpx[s] = move ? px : b.fpx[s];
    b.fpy[s] = move ? py : b.fpy[s];
    b.fvx[s] = move ? vx : b.fvx[s];
    b.fvy[s] = move ? vy : b.fvy[s];
  }

  // 2, 3, 4, 5 for missiles: guidance, integration, clock and the swept hit test, per slot;
  // a slot idle in every lane of the block is skipped.
  I hit_by[2];  // number of missiles of side s that hit in this step, negated
  for (int s = 0; s < 2; ++s) {
    const int t = 1 - s;
    hit_by[s] = zero_i;
    for (int k = 0; k < M; ++k) {
      const I steer = b.mact[s][k] & b.live;
      if (!any_of(steer)) continue;
      V px = b.mpx[s][k], py = b.mpy[s][k], vx = b.mvx[s][k], vy = b.mvy[s][k];
      // 2. Proportional navigation from the start-of-step state.
      const V rx = tpx0[t] - px, ry = tpy0[t] - py;
      const V wx = tvx0[t] - vx, wy = tvy0[t] - vy;
      // rudder = N * Vc * lambda_dot / (V^2 c) with Vc = -(r.w)/|r|, lambda_dot = (r x w)/|r|^2,
      // taken as one quotient (one division instead of three).
      V r2 = rx * rx + ry * ry;
      r2 = r2 > T(1e-6) ? r2 : T(1e-6);
      V v2 = vx * vx + vy * vy;
      v2 = v2 > T(1e-6) ? v2 : T(1e-6);
      const V cmd = P.nav * -(rx * wx + ry * wy) * (rx * wy - ry * wx);
      const V rud = vclamp(cmd / (r2 * vsqrt(r2) * (v2 * P.m_c)), -1.0, 1.0);
      // 3. Integration.
      const V thrust = (b.msteps[s][k] < P.burn) ? zero + P.m_thrust : zero;
      const V px0 = px, py0 = py;
      aero_step(px, py, vx, vy, rud, thrust, P.m_cd0, P.m_k, P.m_c, P.m_cdt, P.dt);
      // 5. Closest approach during the step, relative motion linear.
      const V d0x = px0 - tpx0[t], d0y = py0 - tpy0[t];
      const V d1x = px - b.fpx[t], d1y = py - b.fpy[t];
      // With s* = -d0.e / |e|^2 inside (0, 1) the squared closest distance is
      // |d0|^2 - (d0.e)^2 / |e|^2, compared here multiplied by |e|^2: no division.
      const V ex = d1x - d0x, ey = d1y - d0y;
      const V ee = ex * ex + ey * ey;
      const V num = -(d0x * ex + d0y * ey);
      const V dd0 = d0x * d0x + d0y * d0y, dd1 = d1x * d1x + d1y * d1y;
      const I inside = (ee >= T(1e-12)) & (num > T(0)) & (num < ee);
      const I near = inside ? (dd0 * ee - num * num < P.hit_r2 * ee)
                            : (((ee >= T(1e-12)) & (num >= ee)) ? (dd1 < P.hit_r2) : (dd0 < P.hit_r2));
      const I hit = steer & alive0[t] & near;
      b.mrud[s][k] = steer ? rud : b.mrud[s][k];
      b.mpx[s][k] = steer ? px : b.mpx[s][k];
      b.mpy[s][k] = steer ? py : b.mpy[s][k];
      b.mvx[s][k] = steer ? vx : b.mvx[s][k];
      b.mvy[s][k] = steer ? vy : b.mvy[s][k];
      // 4. Clock.
      b.msteps[s][k] -= steer;
      b.mact[s][k] &= ~hit;
      hit_by[s] += hit;
    }
  }

  // 4. Fighter and episode clocks; 6-7. arena and destruction.
  I out[2], hit_f[2], destroyed[2];
  for (int s = 0; s < 2; ++s) {
    b.fsince[s] -= b.live;
    b.hits[s] -= hit_by[s];
    hit_f[s] = hit_by[1 - s] != 0;
    const V ax = b.fpx[s] < T(0) ? -b.fpx[s] : b.fpx[s];
    const V ay = b.fpy[s] < T(0) ? -b.fpy[s] : b.fpy[s];
    out[s] = b.falive[s] & b.live & ((ax > P.half) | (ay > P.half));
    destroyed[s] = hit_f[s] | out[s];
    b.falive[s] &= ~destroyed[s];
  }
  b.physics -= b.live;

  // 8. Missile loss (only slots still active somewhere need looking at).
  I any_active = zero_i;
  for (int s = 0; s < 2; ++s) {
    const int t = 1 - s;
    for (int k = 0; k < M; ++k) {
      if (!any_of(b.mact[s][k])) continue;
      const V sp2 = b.mvx[s][k] * b.mvx[s][k] + b.mvy[s][k] * b.mvy[s][k];
      const I st = b.msteps[s][k];
      const I lost = ((st >= P.burn) & (sp2 < P.min_speed2)) | (st > P.max_flight) | ~b.falive[t];
      b.mact[s][k] &= ~(lost & b.live);
      any_active |= b.mact[s][k];
    }
  }

  // 9. Outcome.
  const I any_destroyed = destroyed[0] | destroyed[1];
  const I ammo_out = b.live & ~any_destroyed & (b.fammo[0] == 0) & (b.fammo[1] == 0) & ~any_active;
  const I end_now = any_destroyed | ammo_out;
  const I winner = ((destroyed[0] & destroyed[1]) | ammo_out) ? zero_i + 2 : (destroyed[0] ? zero_i + 1 : zero_i);
  const I reason = ammo_out ? zero_i + 4
                            : ((out[0] | out[1]) ? zero_i + 3 : ((hit_f[0] & hit_f[1]) ? zero_i + 2 : zero_i + 1));
  b.winner = end_now ? winner : b.winner;
  b.reason = end_now ? reason : b.reason;
  b.terminated |= end_now;
  b.live &= ~end_now;
}

}  // namespace
