// The simulator's CPU kernel: one whole decision step (sim/RULES.md) for a block of environments
// at a time, with the block's state held in small local arrays across all physics steps.
//
// Why this shape: the torch path runs each phase over all N environments, so every physics step
// streams the whole state through memory several times, and it integrates every missile slot
// whether it flies or not (static shapes keep it branchless and graph-capturable on
// accelerators). Here a block of LANES environments is loaded once, stepped through all its
// physics steps in L1, closed (truncation, outcome, rewards), observed and stored once; the
// lane loops are plain elementwise code that the compiler vectorizes, and a missile slot that is
// idle in every lane of the block is skipped.
//
// Semantics follow sim/kernels.py and sim/observe.py line by line; only the rounding differs
// (sin/cos of the exact turn come from a short polynomial in float32, and frozen bodies are not
// touched at all). Registered as torch.ops.midrange_sim.* so torch.compile treats it as opaque;
// the dispatcher releases the GIL while it runs.

#include <ATen/Parallel.h>
#include <torch/library.h>
#include <ATen/core/Tensor.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

namespace {

constexpr int LANES = 16;      // environments per block: one AVX-512 register of float32
constexpr int MAX_SLOTS = 16;  // missile slots per side this kernel holds (checked on entry)

// Lane vectors (GCC/Clang vector extensions): arithmetic, comparisons (giving -1/0 masks of the
// same width) and `mask ? a : b` are elementwise, so the physics below reads like the scalar
// rules and compiles to SIMD whatever the register width (AVX-512, AVX2, SSE).
template <typename T> struct Lanes;
template <> struct Lanes<float> {
  typedef float V __attribute__((vector_size(LANES * 4)));
  typedef int32_t I __attribute__((vector_size(LANES * 4)));
};
template <> struct Lanes<double> {
  typedef double V __attribute__((vector_size(LANES * 8)));
  typedef int64_t I __attribute__((vector_size(LANES * 8)));
};

template <typename V>
inline V vsqrt(V a) {
  V r;
  for (int l = 0; l < LANES; ++l) r[l] = std::sqrt(a[l]);
  return r;
}

template <typename I>
inline bool any_of(I m) {
  typename std::remove_reference<decltype(m[0])>::type acc = 0;
  for (int l = 0; l < LANES; ++l) acc |= m[l];
  return acc != 0;
}

// sin and cos of the turn angle. float32: Cody-Waite reduction by pi/2 and Cephes' minimax
// polynomials (about 1 ulp on the reduced argument), plain arithmetic without -ffast-math.
inline void vsincos(Lanes<float>::V x, Lanes<float>::V& s, Lanes<float>::V& c) {
  typedef Lanes<float>::V V;
  typedef Lanes<float>::I I;
  const V k = (x * 0.63661977236758134f + 12582912.0f) - 12582912.0f;  // round to nearest
  V r = x - k * 1.5703125f;
  r = r - k * 4.837512969970703125e-4f;
  r = r - k * 7.54978995489188216e-8f;
  const V z = r * r;
  const V sp = ((-1.9515295891e-4f * z + 8.3321608736e-3f) * z - 1.6666654611e-1f) * z * r + r;
  const V cp = ((2.443315711809948e-5f * z - 1.388731625493765e-3f) * z + 4.166664568298827e-2f) * z * z
               - 0.5f * z + 1.0f;
  const I q = __builtin_convertvector(k, I);
  const I odd = (q & 1) != 0;
  const V s0 = odd ? cp : sp;
  const V c0 = odd ? sp : cp;
  s = ((q & 2) != 0) ? -s0 : s0;
  c = (((q + 1) & 2) != 0) ? -c0 : c0;
}

inline void vsincos(Lanes<double>::V x, Lanes<double>::V& s, Lanes<double>::V& c) {
  for (int l = 0; l < LANES; ++l) {
    s[l] = std::sin(x[l]);
    c[l] = std::cos(x[l]);
  }
}

// ------------------------------------------------------------------ parameters

enum FParam {
  P_DT, P_LAUNCH_OFFSET, P_NAV, P_HIT_R2, P_HALF, P_MIN_SPEED2,
  P_F_CD0, P_F_K, P_F_C, P_F_THRUST, P_M_CD0, P_M_K, P_M_C, P_M_THRUST,
  P_MAX_TIME, P_MPF, P_FLIGHT_SCALE, P_RANGE_SCALE, P_SPEED_SCALE, P_MSPEED_SCALE,
  P_CLOSING_SCALE, P_NORM_EPS, P_OBS_CLIP, NUM_FPARAMS
};
enum IParam {
  P_SLOTS, P_STEPS, P_COOLDOWN, P_BURN, P_MAX_FLIGHT, P_TIME_LIMIT, P_OBS_IN, P_OBS_OWN,
  P_OBS_DIM, NUM_IPARAMS
};

template <typename T>
struct Params {
  T dt, launch_offset, nav, hit_r2, half, min_speed2;
  T f_cd0, f_k, f_c, f_thrust, m_cd0, m_k, m_c, m_thrust;
  T max_time, mpf, flight_scale, range_scale, speed_scale, mspeed_scale, closing_scale, eps, clip;
  T f_cdt, m_cdt;  // c * dt, rounded once as the torch path does
  int slots, steps, cooldown, burn, max_flight, obs_in, obs_own, obs_dim;
  int64_t time_limit;

  Params(const std::vector<double>& f, const std::vector<int64_t>& i) {
    TORCH_CHECK(f.size() == NUM_FPARAMS, "midrange_sim: expected ", NUM_FPARAMS, " float parameters");
    TORCH_CHECK(i.size() == NUM_IPARAMS, "midrange_sim: expected ", NUM_IPARAMS, " int parameters");
    dt = T(f[P_DT]); launch_offset = T(f[P_LAUNCH_OFFSET]); nav = T(f[P_NAV]);
    hit_r2 = T(f[P_HIT_R2]); half = T(f[P_HALF]); min_speed2 = T(f[P_MIN_SPEED2]);
    f_cd0 = T(f[P_F_CD0]); f_k = T(f[P_F_K]); f_c = T(f[P_F_C]); f_thrust = T(f[P_F_THRUST]);
    m_cd0 = T(f[P_M_CD0]); m_k = T(f[P_M_K]); m_c = T(f[P_M_C]); m_thrust = T(f[P_M_THRUST]);
    max_time = T(f[P_MAX_TIME]); mpf = T(f[P_MPF]); flight_scale = T(f[P_FLIGHT_SCALE]);
    range_scale = T(f[P_RANGE_SCALE]); speed_scale = T(f[P_SPEED_SCALE]);
    mspeed_scale = T(f[P_MSPEED_SCALE]); closing_scale = T(f[P_CLOSING_SCALE]);
    eps = T(f[P_NORM_EPS]); clip = T(f[P_OBS_CLIP]);
    f_cdt = T(f[P_F_C] * f[P_DT]); m_cdt = T(f[P_M_C] * f[P_DT]);
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

// ------------------------------------------------------------------ the state, as pointers

// Order of the tensors in the state list (sim/native.py STATE_FIELDS).
enum StateField {
  S_F_PX, S_F_PY, S_F_VX, S_F_VY, S_F_THROTTLE, S_F_RUDDER, S_F_ALIVE, S_F_AMMO, S_F_SINCE,
  S_F_FIRE, S_M_ACTIVE, S_M_PX, S_M_PY, S_M_VX, S_M_VY, S_M_RUDDER, S_M_STEPS, S_PHYSICS,
  S_DECISIONS, NUM_STATE
};
// Order of the accumulator tensors (sim/native.py ACC_FIELDS).
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

template <typename V>
inline V vclamp(V v, double lo, double hi) {
  typedef typename std::remove_reference<decltype(v[0])>::type T;
  v = v < T(lo) ? T(lo) : v;
  return v > T(hi) ? T(hi) : v;
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
    TORCH_CHECK(col == D, "midrange_sim: observation width ", col, " != obs_dim ", D);
  }
  const size_t row = sizeof(T) * 2 * D;
  for (int l = 0; l < LANES; ++l) {
    if (b.env[l] < 0) continue;
    std::memcpy(out + b.env[l] * 2 * D, buf + l * 2 * D, row);
    if (out2 != nullptr) std::memcpy(out2 + b.env[l] * 2 * D, buf + l * 2 * D, row);
  }
}

// ------------------------------------------------------------------ the ops

template <typename T>
void decision_impl(const std::vector<at::Tensor>& state, const std::vector<at::Tensor>& acc,
                   at::Tensor& obs, at::Tensor& final_obs, const Params<T>& P, bool write_obs) {
  const StatePtrs<T> sp(state);
  const int64_t n = sp.n;
  TORCH_CHECK(acc.size() == NUM_ACC, "midrange_sim: expected ", NUM_ACC, " accumulator tensors");
  for (const auto& t : acc) {
    TORCH_CHECK(t.device().is_cpu() && t.is_contiguous(), "midrange_sim: accumulators must be contiguous CPU tensors");
  }
  bool* a_live = acc[A_LIVE].data_ptr<bool>();
  bool* a_term = acc[A_TERMINATED].data_ptr<bool>();
  bool* a_trunc = acc[A_TRUNCATED].data_ptr<bool>();
  bool* a_done = acc[A_DONE].data_ptr<bool>();
  int64_t* a_winner = acc[A_WINNER].data_ptr<int64_t>();
  int64_t* a_end = acc[A_END].data_ptr<int64_t>();
  int64_t* a_launch = acc[A_LAUNCHES].data_ptr<int64_t>();
  int64_t* a_hits = acc[A_HITS].data_ptr<int64_t>();
  T* a_reward = acc[A_REWARD].data_ptr<T>();
  T* o1 = nullptr;
  T* o2 = nullptr;
  if (write_obs) {
    TORCH_CHECK(obs.is_contiguous() && final_obs.is_contiguous() && obs.numel() == n * 2 * P.obs_dim &&
                    final_obs.numel() == n * 2 * P.obs_dim,
                "midrange_sim: observation buffers must be contiguous [N, 2, obs_dim]");
    o1 = final_obs.data_ptr<T>();
    o2 = obs.data_ptr<T>();
  }
  const int64_t blocks = (n + LANES - 1) / LANES;
  at::parallel_for(0, blocks, 16, [&](int64_t begin, int64_t end) {
    typedef typename Lanes<T>::I I;
    const I zero_i = {};
    Block<T> b;
    std::vector<T> buf(size_t(LANES) * 2 * P.obs_dim);
    for (int64_t blk = begin; blk < end; ++blk) {
      for (int l = 0; l < LANES; ++l) {
        const int64_t e = blk * LANES + l;
        b.env[l] = e < n ? e : -1;
        b.live[l] = e < n ? -1 : 0;
      }
      b.load(sp, P.slots);
      b.terminated = b.truncated = zero_i;
      b.winner = zero_i - 1;
      b.reason = zero_i;
      b.launches[0] = b.launches[1] = b.hits[0] = b.hits[1] = zero_i;
      for (int step = 0; step < P.steps && any_of(b.live); ++step) {
        physics_step(b, P);  // once every lane's episode ended, the block is frozen
      }
      // The decision's closing: truncation, done, rewards.
      const I trunc = b.live & (b.physics >= static_cast<typename Block<T>::IS>(P.time_limit));
      b.truncated = trunc;
      b.winner = trunc ? zero_i + 2 : b.winner;
      b.reason = trunc ? zero_i + 5 : b.reason;
      b.done = b.terminated | trunc;
      b.store(sp, P.slots);
      for (int l = 0; l < LANES; ++l) {
        const int64_t e = b.env[l];
        if (e < 0) continue;
        a_live[e] = b.live[l] != 0; a_term[e] = b.terminated[l] != 0; a_trunc[e] = b.truncated[l] != 0;
        a_done[e] = b.done[l] != 0; a_winner[e] = b.winner[l]; a_end[e] = b.reason[l];
        a_launch[e] = b.launches[0][l]; a_launch[n + e] = b.launches[1][l];
        a_hits[e] = b.hits[0][l]; a_hits[n + e] = b.hits[1][l];
        const T red = (b.terminated[l] && b.winner[l] == 0) ? T(1) : T(0);
        const T blue = (b.terminated[l] && b.winner[l] == 1) ? T(1) : T(0);
        a_reward[e] = red - blue;
        a_reward[n + e] = blue - red;
      }
      if (write_obs) observe_block(b, P, buf.data(), o1, o2);
    }
  });
}

template <typename T>
void observe_impl(const std::vector<at::Tensor>& state, const at::Tensor& env_index, at::Tensor& out,
                  const Params<T>& P) {
  const StatePtrs<T> sp(state);
  TORCH_CHECK(env_index.scalar_type() == at::kLong && env_index.is_contiguous() && env_index.dim() == 1,
              "midrange_sim: env_index must be a contiguous int64 vector");
  TORCH_CHECK(out.is_contiguous() && out.numel() == sp.n * 2 * P.obs_dim,
              "midrange_sim: out must be a contiguous [N, 2, obs_dim] buffer");
  const int64_t* idx = env_index.data_ptr<int64_t>();
  const int64_t count = env_index.numel();
  for (int64_t i = 0; i < count; ++i) {
    TORCH_CHECK(idx[i] >= 0 && idx[i] < sp.n, "midrange_sim: env_index out of range");
  }
  T* o = out.data_ptr<T>();
  const int64_t blocks = (count + LANES - 1) / LANES;
  at::parallel_for(0, blocks, 16, [&](int64_t begin, int64_t end) {
    Block<T> b;
    std::vector<T> buf(size_t(LANES) * 2 * P.obs_dim);
    for (int64_t blk = begin; blk < end; ++blk) {
      for (int l = 0; l < LANES; ++l) {
        const int64_t i = blk * LANES + l;
        b.env[l] = i < count ? idx[i] : -1;
      }
      b.load(sp, P.slots);
      observe_block(b, P, buf.data(), o, static_cast<T*>(nullptr));
    }
  });
}

void decision_step(at::TensorList state, at::TensorList acc, at::Tensor obs, at::Tensor final_obs,
                   at::ArrayRef<double> fparams, at::IntArrayRef iparams, bool write_obs) {
  const std::vector<at::Tensor> s(state.begin(), state.end());
  const std::vector<at::Tensor> a(acc.begin(), acc.end());
  const std::vector<double> f(fparams.begin(), fparams.end());
  const std::vector<int64_t> i(iparams.begin(), iparams.end());
  const auto dtype = s.at(S_F_PX).scalar_type();
  if (dtype == at::kFloat) {
    decision_impl<float>(s, a, obs, final_obs, Params<float>(f, i), write_obs);
  } else if (dtype == at::kDouble) {
    decision_impl<double>(s, a, obs, final_obs, Params<double>(f, i), write_obs);
  } else {
    TORCH_CHECK(false, "midrange_sim: state must be float32 or float64, got ", dtype);
  }
}

void observe(at::TensorList state, at::Tensor env_index, at::Tensor out, at::ArrayRef<double> fparams,
             at::IntArrayRef iparams) {
  const std::vector<at::Tensor> s(state.begin(), state.end());
  const std::vector<double> f(fparams.begin(), fparams.end());
  const std::vector<int64_t> i(iparams.begin(), iparams.end());
  const auto dtype = s.at(S_F_PX).scalar_type();
  if (dtype == at::kFloat) {
    observe_impl<float>(s, env_index, out, Params<float>(f, i));
  } else if (dtype == at::kDouble) {
    observe_impl<double>(s, env_index, out, Params<double>(f, i));
  } else {
    TORCH_CHECK(false, "midrange_sim: state must be float32 or float64, got ", dtype);
  }
}

}  // namespace

TORCH_LIBRARY(midrange_sim, m) {
  m.def(
      "decision_step(Tensor(a!)[] state, Tensor(b!)[] acc, Tensor(c!) obs, Tensor(d!) final_obs, "
      "float[] fparams, int[] iparams, bool write_obs) -> ()");
  m.def("observe(Tensor[] state, Tensor env_index, Tensor(a!) out, float[] fparams, int[] iparams) -> ()");
}

TORCH_LIBRARY_IMPL(midrange_sim, CPU, m) {
  m.impl("decision_step", &decision_step);
  m.impl("observe", &observe);
}
