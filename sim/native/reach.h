// The observation's reach block (sim/layout.py ``reach``), per lane: trilinear lookups in the
// measured reach tables and the escape time margin's root search, following
// sim/reach/spacetime.py (reach_observation) and sim/reach/tables.py (ReachTables.lookup)
// operation by operation, in the state's precision.

#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace {

// The escape time margin looks for the gap's change of sign at these times (s), ahead or back,
// and is clipped to the horizon: sim/reach/spacetime.py's MARGIN_SAMPLES_S, MARGIN_HORIZON_S.
constexpr double MARGIN_SAMPLES[5] = {5.0, 10.0, 20.0, 35.0, 60.0};
constexpr double MARGIN_HORIZON = 60.0;

// One even grid of a table axis: its first two nodes (the spacing is their difference, taken in
// the state's precision as the torch lookup does) and its node count.
template <typename T>
struct Grid {
  T first, second;
  int count;

  // The lower node and the upper node's weight of ``value`` (clamped to the grid's ends).
  void node(T value, int& lo, T& weight) const {
    T pos = (value - first) / (second - first);
    pos = pos < T(0) ? T(0) : (pos > T(count - 1) ? T(count - 1) : pos);
    T low = std::floor(pos);
    low = low > T(count - 2) ? T(count - 2) : low;
    lo = int(low);
    weight = pos - low;
  }
};

// The reach tables ``reach_m [2, S, V, A]`` (straight target, then escaping target) and their
// grids of shooter speed, target speed and aspect.
template <typename T>
struct ReachTable {
  Grid<T> shooter, target, aspect;
  std::vector<T> reach;

  // Reach (m) of table ``which`` for one geometry (aspect as the target's heading against the
  // line of sight, cosine and sine: ReachTables.lookup).
  T lookup(int which, T shooter_speed, T target_speed, T aspect_cos, T aspect_sin) const {
    int i, j, k;
    T wi, wj, wk;
    shooter.node(shooter_speed, i, wi);
    target.node(target_speed, j, wj);
    aspect.node(std::atan2(std::fabs(aspect_sin), aspect_cos), k, wk);
    const int v = target.count, a = aspect.count;
    const T* flat = reach.data() + size_t(which) * shooter.count * v * a;
    const int base = (i * v + j) * a + k;
    const int offsets[4] = {0, a, v * a, v * a + a};
    const T weights[4] = {(T(1) - wi) * (T(1) - wj), (T(1) - wi) * wj, wi * (T(1) - wj), wi * wj};
    T out = T(0);
    for (int c = 0; c < 4; ++c) {
      const T lo = flat[base + offsets[c]], hi = flat[base + offsets[c] + 1];
      out = out + weights[c] * (lo + (hi - lo) * wk);
    }
    return out;
  }

  // Range minus the enemy's reach against me turning away, both flown straight on for ``t`` s.
  T escape_gap(T rx, T ry, T ovx, T ovy, T evx, T evy, T t) const {
    const T px = rx + (evx - ovx) * t, py = ry + (evy - ovy) * t;
    T rng = std::sqrt(px * px + py * py);
    rng = rng < T(1e-6) ? T(1e-6) : rng;
    const T ux = -px / rng, uy = -py / rng;
    const T own_speed = std::sqrt(ovx * ovx + ovy * ovy);
    const T inv = T(1) / (own_speed < T(1e-6) ? T(1e-6) : own_speed);
    const T reach_m = lookup(1, std::sqrt(evx * evx + evy * evy), own_speed, (ovx * ux + ovy * uy) * inv,
                             (ux * ovy - uy * ovx) * inv);
    return rng - reach_m;
  }

  // The escape time margin (s): spacetime.escape_time_margin for one geometry.
  T escape_margin(T rx, T ry, T ovx, T ovy, T evx, T evy) const {
    auto gap = [&](T t) { return escape_gap(rx, ry, ovx, ovy, evx, evy, t); };
    const T g0 = gap(T(0));
    const T sign = g0 > T(0) ? T(1) : T(-1);
    T ta = T(0), ga = g0, tb = T(INFINITY), gb = g0;
    bool found = false;
    for (double sample : MARGIN_SAMPLES) {
      const T t = sign * T(sample);
      const T g = gap(t);
      const bool fresh = !found && ((g > T(0)) != (g0 > T(0)));
      if (fresh) {
        tb = t;
        gb = g;
      }
      found = found || fresh;
      if (!found) {
        ta = t;
        ga = g;
      }
    }
    for (int step = 0; step < 2; ++step) {
      const T denom = found ? gb - ga : T(1);
      const T t = found ? ta - ga * (tb - ta) / denom : ta;
      const T g = gap(t);
      if ((g > T(0)) == (ga > T(0))) {
        ta = t;
        ga = g;
      } else {
        tb = t;
        gb = g;
      }
    }
    const T denom = found ? gb - ga : T(1);
    const T root = found ? ta - ga * (tb - ta) / denom : sign * T(MARGIN_HORIZON);
    return root < T(-MARGIN_HORIZON) ? T(-MARGIN_HORIZON) : (root > T(MARGIN_HORIZON) ? T(MARGIN_HORIZON) : root);
  }

  // The block's four values, unscaled: own reach against the enemy flying straight and against
  // it turning away, the enemy's reach against me turning away (m), and my escape time margin
  // (s), from the enemy's position relative to me and both velocities.
  void observe(T rx, T ry, T ovx, T ovy, T evx, T evy, T& own_reach, T& own_escape_reach, T& enemy_reach,
               T& margin) const {
    T rng = std::sqrt(rx * rx + ry * ry);
    rng = rng < T(1e-6) ? T(1e-6) : rng;
    const T ux = rx / rng, uy = ry / rng;
    const T own_speed = std::sqrt(ovx * ovx + ovy * ovy);
    const T enemy_speed = std::sqrt(evx * evx + evy * evy);
    const T os = own_speed < T(1e-6) ? T(1e-6) : own_speed;
    const T es = enemy_speed < T(1e-6) ? T(1e-6) : enemy_speed;
    own_reach = lookup(0, own_speed, enemy_speed, (evx * ux + evy * uy) / es, (ux * evy - uy * evx) / es);
    own_escape_reach = lookup(1, own_speed, enemy_speed, (evx * ux + evy * uy) / es, (ux * evy - uy * evx) / es);
    enemy_reach = lookup(1, enemy_speed, own_speed, -(ovx * ux + ovy * uy) / os, (uy * ovx - ux * ovy) / os);
    margin = escape_margin(rx, ry, ovx, ovy, evx, evy);
  }
};

}  // namespace
