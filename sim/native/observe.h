// The observation builder: a block's rows of both sides' observations (sim/observe.py).

#pragma once

#include <cstdint>
#include <cstring>
#include <limits>

#include "lanes.h"
#include "params.h"
#include "state.h"

namespace {

// ------------------------------------------------------------------ observations

// Observations of the block's lanes into out[env] (both sides, obs_dim each), following
// sim/observe.py; with out2, the same values are written there too. ``buf`` holds
// LANES * 2 * obs_dim values: the block's rows, assembled in cache and copied out whole.
template <typename T>
void observe_block(const Block<T>& b, const Params<T>& P, T* buf, T* out, T* out2) {
  typedef typename Lanes<T>::V V;
  typedef typename Lanes<T>::I I;
  const int M = P.slots, D = P.obs_dim;
  const T eps = P.eps;
  const I zero_i = {};
  const V zero = {};
  for (int o = 0; o < 2; ++o) {
    const int e = 1 - o;
    int col = 0;
    auto emit = [&](V val) {
      val = vclamp(val, -double(P.clip), double(P.clip));
      T* at = buf + o * D + col;
      for (int l = 0; l < LANES; ++l) at[l * 2 * D] = val[l];
      ++col;
    };
    auto norm = [&](V x, V y) {
      const V a = vsqrt(x * x + y * y);
      return a > eps ? a : eps;
    };
    const V so = norm(b.fvx[o], b.fvy[o]);
    const V nx = b.fvx[o] / so, ny = b.fvy[o] / so;
    const V lx = -ny, ly = nx;
    const V se = norm(b.fvx[e], b.fvy[e]);
    const V enx = b.fvx[e] / se, eny = b.fvy[e] / se;
    // own (10)
    emit(b.fpx[o] / P.half);
    emit(b.fpy[o] / P.half);
    emit(nx);
    emit(ny);
    emit(so / P.speed_scale);
    emit(__builtin_convertvector(b.fammo[o], V) / P.mpf);
    if (P.cooldown == 0) {
      emit(zero + T(1));
    } else {
      const V r = __builtin_convertvector(b.fsince[o], V) / T(P.cooldown);
      emit(r < T(1) ? r : T(1));
    }
    emit(b.falive[o] ? zero + T(1) : zero);
    emit(b.fthr[o]);
    emit(b.frud[o]);
    // enemy (10)
    const V rx = b.fpx[e] - b.fpx[o], ry = b.fpy[e] - b.fpy[o];
    const V rng = norm(rx, ry);
    const V wx = b.fvx[e] - b.fvx[o], wy = b.fvy[e] - b.fvy[o];
    emit(b.falive[e] ? zero + T(1) : zero);
    emit(rng / P.range_scale);
    emit((rx * nx + ry * ny) / rng);
    emit((rx * lx + ry * ly) / rng);
    emit(enx * nx + eny * ny);
    emit(enx * lx + eny * ly);
    emit(se / P.speed_scale);
    emit(-(rx * wx + ry * wy) / rng / P.closing_scale);
    emit(__builtin_convertvector(b.fammo[e], V) / P.mpf);
    emit(-(rx * enx + ry * eny) / rng);

    // The nearest active slots of one side against one point (ties by slot index): the rank of
    // every slot, then per entry the selected slot's raw state by masked selects over slots.
    // Slots idle in every lane take no part (an idle slot's infinite key never outranks an
    // active one), and entries past the block's largest active count are all zero.
    auto select = [&](int side, V qx, V qy, int count, auto&& fields) {
      const V inf = zero + std::numeric_limits<T>::infinity();
      V key[MAX_SLOTS];
      I rank[MAX_SLOTS];
      int slot[MAX_SLOTS];
      int used = 0;
      I active_count = zero_i;
      for (int k = 0; k < M; ++k) {
        if (!any_of(b.mact[side][k])) continue;
        slot[used] = k;
        key[used] = b.mact[side][k] ? norm(qx - b.mpx[side][k], qy - b.mpy[side][k]) : inf;
        rank[used] = zero_i;
        active_count -= b.mact[side][k];
        ++used;
      }
      int most = 0;
      for (int l = 0; l < LANES; ++l) most = active_count[l] > most ? int(active_count[l]) : most;
      for (int a = 0; a < used; ++a) {
        for (int j = 0; j < used; ++j) {
          if (j == a) continue;
          rank[a] -= (j < a) ? (key[j] <= key[a]) : (key[j] < key[a]);
        }
      }
      for (int c = 0; c < count; ++c) {
        V px = zero, py = zero, vx = zero, vy = zero;
        I st = zero_i, present = zero_i;
        if (c >= most) {
          fields(px, py, vx, vy, st, present);
          continue;
        }
        for (int a = 0; a < used; ++a) {
          const int k = slot[a];
          const I pick = (rank[a] == c) & b.mact[side][k];
          px = pick ? b.mpx[side][k] : px;
          py = pick ? b.mpy[side][k] : py;
          vx = pick ? b.mvx[side][k] : vx;
          vy = pick ? b.mvy[side][k] : vy;
          st = pick ? b.msteps[side][k] : st;
          present |= pick;
        }
        fields(px, py, vx, vy, st, present);
      }
    };

    // incoming (9 per entry): the enemy's missiles seen from o.
    select(e, b.fpx[o], b.fpy[o], P.obs_in, [&](V px, V py, V vx, V vy, I st, I present) {
      const V dx = b.fpx[o] - px, dy = b.fpy[o] - py;
      const V dist = norm(dx, dy);
      const V ms = norm(vx, vy);
      const V mnx = vx / ms, mny = vy / ms;
      const V cvx = b.fvx[o] - vx, cvy = b.fvy[o] - vy;
      emit(present ? zero + T(1) : zero);
      emit(present ? dist / P.range_scale : zero);
      emit(present ? -(dx * nx + dy * ny) / dist : zero);
      emit(present ? -(dx * lx + dy * ly) / dist : zero);
      emit(present ? mnx * nx + mny * ny : zero);
      emit(present ? mnx * lx + mny * ly : zero);
      emit(present ? ms / P.mspeed_scale : zero);
      emit(present ? -(dx * cvx + dy * cvy) / dist / P.closing_scale : zero);
      emit((present & (st < P.burn)) ? zero + T(1) : zero);
    });
    // own missiles (6 per entry), against their target, the enemy fighter.
    select(o, b.fpx[e], b.fpy[e], P.obs_own, [&](V px, V py, V vx, V vy, I st, I present) {
      const V qx = b.fpx[e] - px, qy = b.fpy[e] - py;
      const V qd = norm(qx, qy);
      const V qvx = b.fvx[e] - vx, qvy = b.fvy[e] - vy;
      emit(present ? zero + T(1) : zero);
      emit(present ? qd / P.range_scale : zero);
      emit(present ? norm(vx, vy) / P.mspeed_scale : zero);
      emit(present ? -(qx * qvx + qy * qvy) / qd / P.closing_scale : zero);
      emit(present ? __builtin_convertvector(st, V) * P.flight_scale : zero);
      emit((present & (st < P.burn)) ? zero + T(1) : zero);
    });
    // time (1)
    const V left = T(1) - (__builtin_convertvector(b.physics, V) * P.dt) / P.max_time;
    emit(left > T(0) ? left : zero);
    // reach (4, with obs_reach): table lookups per lane (sim/native/reach.h).
    if (P.obs_reach) {
      V own_reach, own_escape_reach, enemy_reach, margin;
      for (int l = 0; l < LANES; ++l) {
        T a = T(0), x = T(0), c = T(0), m = T(0);
        if (b.env[l] >= 0) {
          P.reach.observe(rx[l], ry[l], b.fvx[o][l], b.fvy[o][l], b.fvx[e][l], b.fvy[e][l], a, x, c, m);
        }
        own_reach[l] = a;
        own_escape_reach[l] = x;
        enemy_reach[l] = c;
        margin[l] = m;
      }
      emit(own_reach / P.range_scale);
      emit(own_escape_reach / P.range_scale);
      emit(enemy_reach / P.range_scale);
      emit(margin / P.margin_scale);
    }
    TORCH_CHECK(col == D, "midrange_sim: observation width ", col, " != obs_dim ", D);
  }
  const size_t row = sizeof(T) * 2 * D;
  for (int l = 0; l < LANES; ++l) {
    if (b.env[l] < 0) continue;
    std::memcpy(out + b.env[l] * 2 * D, buf + l * 2 * D, row);
    if (out2 != nullptr) std::memcpy(out2 + b.env[l] * 2 * D, buf + l * 2 * D, row);
  }
}

}  // namespace
