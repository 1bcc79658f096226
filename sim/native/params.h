// The model's parameters as the ops receive them (a float64 tensor and an int list built by
// sim/native/__init__.py, NativeKernel), unpacked and checked once per call.

#pragma once

#include <c10/util/Exception.h>

#include <cstdint>
#include <vector>

#include "lanes.h"
#include "reach.h"

namespace {

// ------------------------------------------------------------------ parameters

enum FParam {
  P_DT, P_LAUNCH_OFFSET, P_NAV, P_HIT_R2, P_HALF, P_MIN_SPEED2,
  P_F_CD0, P_F_K, P_F_C, P_F_THRUST, P_M_CD0, P_M_K, P_M_C, P_M_THRUST,
  P_MAX_TIME, P_MPF, P_FLIGHT_SCALE, P_RANGE_SCALE, P_SPEED_SCALE, P_MSPEED_SCALE,
  P_CLOSING_SCALE, P_NORM_EPS, P_OBS_CLIP,
  // The reach block's grids (first two nodes of each) and scale; with P_OBS_REACH the table
  // reach_m [2, S, V, A] follows these in the list, flattened.
  P_REACH_S0, P_REACH_S1, P_REACH_V0, P_REACH_V1, P_REACH_A0, P_REACH_A1, P_MARGIN_SCALE, NUM_FPARAMS
};
enum IParam {
  P_SLOTS, P_STEPS, P_COOLDOWN, P_BURN, P_MAX_FLIGHT, P_TIME_LIMIT, P_OBS_IN, P_OBS_OWN,
  P_OBS_DIM, P_OBS_REACH, P_REACH_NS, P_REACH_NV, P_REACH_NA, NUM_IPARAMS
};

template <typename T>
struct Params {
  T dt, launch_offset, nav, hit_r2, half, min_speed2;
  T f_cd0, f_k, f_c, f_thrust, m_cd0, m_k, m_c, m_thrust;
  T max_time, mpf, flight_scale, range_scale, speed_scale, mspeed_scale, closing_scale, eps, clip;
  T f_cdt, m_cdt;  // c * dt, rounded once as the torch path does
  T margin_scale;
  int slots, steps, cooldown, burn, max_flight, obs_in, obs_own, obs_dim;
  bool obs_reach;
  ReachTable<T> reach;  // the reach block's tables (empty without obs_reach)
  int64_t time_limit;

  Params(const std::vector<double>& f, const std::vector<int64_t>& i) {
    TORCH_CHECK(i.size() == NUM_IPARAMS, "midrange_sim: expected ", NUM_IPARAMS, " int parameters");
    obs_reach = i[P_OBS_REACH] != 0;
    const int64_t ns = i[P_REACH_NS], nv = i[P_REACH_NV], na = i[P_REACH_NA];
    const size_t table = obs_reach ? size_t(2 * ns * nv * na) : 0;
    TORCH_CHECK(!obs_reach || (ns >= 2 && nv >= 2 && na >= 2), "midrange_sim: reach grids need two nodes each");
    TORCH_CHECK(f.size() == NUM_FPARAMS + table, "midrange_sim: expected ", NUM_FPARAMS + table,
                " float parameters, got ", f.size());
    dt = T(f[P_DT]); launch_offset = T(f[P_LAUNCH_OFFSET]); nav = T(f[P_NAV]);
    hit_r2 = T(f[P_HIT_R2]); half = T(f[P_HALF]); min_speed2 = T(f[P_MIN_SPEED2]);
    f_cd0 = T(f[P_F_CD0]); f_k = T(f[P_F_K]); f_c = T(f[P_F_C]); f_thrust = T(f[P_F_THRUST]);
    m_cd0 = T(f[P_M_CD0]); m_k = T(f[P_M_K]); m_c = T(f[P_M_C]); m_thrust = T(f[P_M_THRUST]);
    max_time = T(f[P_MAX_TIME]); mpf = T(f[P_MPF]); flight_scale = T(f[P_FLIGHT_SCALE]);
    range_scale = T(f[P_RANGE_SCALE]); speed_scale = T(f[P_SPEED_SCALE]);
    mspeed_scale = T(f[P_MSPEED_SCALE]); closing_scale = T(f[P_CLOSING_SCALE]);
    eps = T(f[P_NORM_EPS]); clip = T(f[P_OBS_CLIP]);
    f_cdt = T(f[P_F_C] * f[P_DT]); m_cdt = T(f[P_M_C] * f[P_DT]);
    margin_scale = T(f[P_MARGIN_SCALE]);
    reach.shooter = {T(f[P_REACH_S0]), T(f[P_REACH_S1]), int(ns)};
    reach.target = {T(f[P_REACH_V0]), T(f[P_REACH_V1]), int(nv)};
    reach.aspect = {T(f[P_REACH_A0]), T(f[P_REACH_A1]), int(na)};
    reach.reach.assign(f.begin() + NUM_FPARAMS, f.end());
    slots = int(i[P_SLOTS]); steps = int(i[P_STEPS]); cooldown = int(i[P_COOLDOWN]);
    burn = int(i[P_BURN]); max_flight = int(i[P_MAX_FLIGHT]); time_limit = i[P_TIME_LIMIT];
    obs_in = int(i[P_OBS_IN]); obs_own = int(i[P_OBS_OWN]); obs_dim = int(i[P_OBS_DIM]);
    TORCH_CHECK(slots >= 1 && slots <= MAX_SLOTS, "midrange_sim: missiles_per_fighter must be in 1..",
                MAX_SLOTS, ", got ", slots);
    TORCH_CHECK(obs_in <= slots && obs_own <= slots, "midrange_sim: observed missiles exceed the slots");
    // Episode clocks run in lane ints, 32 bits wide for float32 states.
    TORCH_CHECK(time_limit + steps < (int64_t(1) << 30), "midrange_sim: time limit too long for the kernel");
  }
};

}  // namespace
