// The simulator's state tensors as raw pointers, and one block of LANES environments loaded from
// them into lane vectors (and stored back) around a decision.

#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "lanes.h"

namespace {

// ------------------------------------------------------------------ the state, as pointers

// Order of the tensors in the state list (sim/native/__init__.py STATE_FIELDS).
enum StateField {
  S_F_PX, S_F_PY, S_F_VX, S_F_VY, S_F_THROTTLE, S_F_RUDDER, S_F_ALIVE, S_F_AMMO, S_F_SINCE,
  S_F_FIRE, S_M_ACTIVE, S_M_PX, S_M_PY, S_M_VX, S_M_VY, S_M_RUDDER, S_M_STEPS, S_PHYSICS,
  S_DECISIONS, NUM_STATE
};
// Order of the accumulator tensors (sim/native/__init__.py ACC_FIELDS).
enum AccField {
  A_LIVE, A_TERMINATED, A_TRUNCATED, A_DONE, A_WINNER, A_END, A_LAUNCHES, A_HITS, A_REWARD,
  NUM_ACC
};

template <typename T>
struct StatePtrs {
  T *f_px, *f_py, *f_vx, *f_vy, *f_thr, *f_rud;
  bool *f_alive, *f_fire;
  int32_t *f_ammo, *f_since;
  bool* m_active;
  T *m_px, *m_py, *m_vx, *m_vy, *m_rud;
  int32_t* m_steps;
  int64_t *physics, *decisions;
  int64_t n;

  explicit StatePtrs(const std::vector<at::Tensor>& s) {
    TORCH_CHECK(s.size() == NUM_STATE, "midrange_sim: expected ", NUM_STATE, " state tensors");
    for (const auto& t : s) {
      TORCH_CHECK(t.device().is_cpu() && t.is_contiguous(), "midrange_sim: state tensors must be contiguous CPU tensors");
    }
    n = s[S_PHYSICS].size(0);
    f_px = s[S_F_PX].data_ptr<T>(); f_py = s[S_F_PY].data_ptr<T>();
    f_vx = s[S_F_VX].data_ptr<T>(); f_vy = s[S_F_VY].data_ptr<T>();
    f_thr = s[S_F_THROTTLE].data_ptr<T>(); f_rud = s[S_F_RUDDER].data_ptr<T>();
    f_alive = s[S_F_ALIVE].data_ptr<bool>(); f_fire = s[S_F_FIRE].data_ptr<bool>();
    f_ammo = s[S_F_AMMO].data_ptr<int32_t>(); f_since = s[S_F_SINCE].data_ptr<int32_t>();
    m_active = s[S_M_ACTIVE].data_ptr<bool>();
    m_px = s[S_M_PX].data_ptr<T>(); m_py = s[S_M_PY].data_ptr<T>();
    m_vx = s[S_M_VX].data_ptr<T>(); m_vy = s[S_M_VY].data_ptr<T>();
    m_rud = s[S_M_RUDDER].data_ptr<T>(); m_steps = s[S_M_STEPS].data_ptr<int32_t>();
    physics = s[S_PHYSICS].data_ptr<int64_t>(); decisions = s[S_DECISIONS].data_ptr<int64_t>();
    for (int k : {S_F_PX, S_F_PY, S_F_VX, S_F_VY, S_F_THROTTLE, S_F_RUDDER, S_F_ALIVE, S_F_AMMO,
                  S_F_SINCE, S_F_FIRE}) {
      TORCH_CHECK(s[k].numel() == 2 * n, "midrange_sim: fighter tensors must be [2, N]");
    }
  }
};

// One block's state in lane vectors, [side][slot]; flags as -1/0 masks.
template <typename T>
struct Block {
  typedef typename Lanes<T>::V V;
  typedef typename Lanes<T>::I I;
  typedef typename std::remove_reference<decltype(std::declval<I>()[0])>::type IS;  // lane int
  int64_t env[LANES];  // environment of each lane, -1 for padding
  V fpx[2], fpy[2], fvx[2], fvy[2], fthr[2], frud[2];
  I falive[2], fammo[2], fsince[2], ffire[2];
  V mpx[2][MAX_SLOTS], mpy[2][MAX_SLOTS], mvx[2][MAX_SLOTS], mvy[2][MAX_SLOTS], mrud[2][MAX_SLOTS];
  I mact[2][MAX_SLOTS], msteps[2][MAX_SLOTS];
  I physics;  // lane int: int64 for float64 states; int32 for float32 ones (a 300 s episode is
              // 3000 steps at dt 0.1 s; the limit is checked in Params)
  I decisions_inc;
  // Accumulators of the decision.
  I live, terminated, truncated, done, winner, reason, launches[2], hits[2];

  // A full block of consecutive environments moves as whole vectors (one load per field).
  bool contiguous() const { return env[0] >= 0 && env[LANES - 1] == env[0] + LANES - 1; }

  template <typename X>
  static V ld(const X* src) {
    V v;
    std::memcpy(&v, src, sizeof(V));
    return v;
  }
  static I ldi(const int32_t* src) {
    I v;
    for (int l = 0; l < LANES; ++l) v[l] = src[l];
    return v;
  }
  static I ldb(const bool* src) {
    I v;
    for (int l = 0; l < LANES; ++l) v[l] = src[l] ? -1 : 0;
    return v;
  }
  static void st(T* dst, V v) { std::memcpy(dst, &v, sizeof(V)); }
  static void sti(int32_t* dst, I v) {
    for (int l = 0; l < LANES; ++l) dst[l] = static_cast<int32_t>(v[l]);
  }
  static void stb(bool* dst, I v) {
    for (int l = 0; l < LANES; ++l) dst[l] = v[l] != 0;
  }

  void load(const StatePtrs<T>& p, int slots) {
    const int64_t n = p.n;
    if (contiguous()) {
      const int64_t e = env[0];
      for (int s = 0; s < 2; ++s) {
        const int64_t i = s * n + e;
        fpx[s] = ld(p.f_px + i); fpy[s] = ld(p.f_py + i); fvx[s] = ld(p.f_vx + i); fvy[s] = ld(p.f_vy + i);
        fthr[s] = ld(p.f_thr + i); frud[s] = ld(p.f_rud + i);
        falive[s] = ldb(p.f_alive + i); ffire[s] = ldb(p.f_fire + i);
        fammo[s] = ldi(p.f_ammo + i); fsince[s] = ldi(p.f_since + i);
        for (int k = 0; k < slots; ++k) {
          const int64_t j = (int64_t(s) * slots + k) * n + e;
          mact[s][k] = ldb(p.m_active + j); msteps[s][k] = ldi(p.m_steps + j);
          mpx[s][k] = ld(p.m_px + j); mpy[s][k] = ld(p.m_py + j);
          mvx[s][k] = ld(p.m_vx + j); mvy[s][k] = ld(p.m_vy + j); mrud[s][k] = ld(p.m_rud + j);
        }
      }
      for (int l = 0; l < LANES; ++l) physics[l] = static_cast<IS>(p.physics[e + l]);
      return;
    }
    for (int l = 0; l < LANES; ++l) {
      const int64_t e = env[l];
      if (e < 0) {  // padding: a frozen, dead, empty environment
        for (int s = 0; s < 2; ++s) {
          fpx[s][l] = fpy[s][l] = fvy[s][l] = fthr[s][l] = frud[s][l] = T(0);
          fvx[s][l] = T(1);
          falive[s][l] = fammo[s][l] = fsince[s][l] = ffire[s][l] = 0;
          for (int k = 0; k < slots; ++k) {
            mact[s][k][l] = msteps[s][k][l] = 0;
            mpx[s][k][l] = mpy[s][k][l] = mvy[s][k][l] = mrud[s][k][l] = T(0);
            mvx[s][k][l] = T(1);
          }
        }
        physics[l] = 0;
        continue;
      }
      for (int s = 0; s < 2; ++s) {
        const int64_t i = s * n + e;
        fpx[s][l] = p.f_px[i]; fpy[s][l] = p.f_py[i]; fvx[s][l] = p.f_vx[i]; fvy[s][l] = p.f_vy[i];
        fthr[s][l] = p.f_thr[i]; frud[s][l] = p.f_rud[i];
        falive[s][l] = p.f_alive[i] ? -1 : 0; ffire[s][l] = p.f_fire[i] ? -1 : 0;
        fammo[s][l] = p.f_ammo[i]; fsince[s][l] = p.f_since[i];
        for (int k = 0; k < slots; ++k) {
          const int64_t j = (int64_t(s) * slots + k) * n + e;
          mact[s][k][l] = p.m_active[j] ? -1 : 0; msteps[s][k][l] = p.m_steps[j];
          mpx[s][k][l] = p.m_px[j]; mpy[s][k][l] = p.m_py[j];
          mvx[s][k][l] = p.m_vx[j]; mvy[s][k][l] = p.m_vy[j]; mrud[s][k][l] = p.m_rud[j];
        }
      }
      physics[l] = static_cast<IS>(p.physics[e]);
    }
  }

  void store(const StatePtrs<T>& p, int slots) const {
    const int64_t n = p.n;
    if (contiguous()) {
      const int64_t e = env[0];
      for (int s = 0; s < 2; ++s) {
        const int64_t i = s * n + e;
        st(p.f_px + i, fpx[s]); st(p.f_py + i, fpy[s]); st(p.f_vx + i, fvx[s]); st(p.f_vy + i, fvy[s]);
        stb(p.f_alive + i, falive[s]); stb(p.f_fire + i, ffire[s]);
        sti(p.f_ammo + i, fammo[s]); sti(p.f_since + i, fsince[s]);
        for (int k = 0; k < slots; ++k) {
          const int64_t j = (int64_t(s) * slots + k) * n + e;
          stb(p.m_active + j, mact[s][k]); sti(p.m_steps + j, msteps[s][k]);
          st(p.m_px + j, mpx[s][k]); st(p.m_py + j, mpy[s][k]);
          st(p.m_vx + j, mvx[s][k]); st(p.m_vy + j, mvy[s][k]); st(p.m_rud + j, mrud[s][k]);
        }
      }
      for (int l = 0; l < LANES; ++l) {
        p.physics[e + l] = physics[l];
        p.decisions[e + l] += 1;
      }
      return;
    }
    for (int l = 0; l < LANES; ++l) {
      const int64_t e = env[l];
      if (e < 0) continue;
      for (int s = 0; s < 2; ++s) {
        const int64_t i = s * n + e;
        p.f_px[i] = fpx[s][l]; p.f_py[i] = fpy[s][l]; p.f_vx[i] = fvx[s][l]; p.f_vy[i] = fvy[s][l];
        p.f_alive[i] = falive[s][l] != 0; p.f_fire[i] = ffire[s][l] != 0;
        p.f_ammo[i] = static_cast<int32_t>(fammo[s][l]); p.f_since[i] = static_cast<int32_t>(fsince[s][l]);
        for (int k = 0; k < slots; ++k) {
          const int64_t j = (int64_t(s) * slots + k) * n + e;
          p.m_active[j] = mact[s][k][l] != 0; p.m_steps[j] = static_cast<int32_t>(msteps[s][k][l]);
          p.m_px[j] = mpx[s][k][l]; p.m_py[j] = mpy[s][k][l];
          p.m_vx[j] = mvx[s][k][l]; p.m_vy[j] = mvy[s][k][l]; p.m_rud[j] = mrud[s][k][l];
        }
      }
      p.physics[e] = physics[l];
      p.decisions[e] += 1;
    }
  }
};

}  // namespace
