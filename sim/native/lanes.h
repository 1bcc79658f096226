// Lane vectors: the SIMD arithmetic the kernel is written in (decision.cpp), LANES environments
// wide, and the few elementwise functions GCC/Clang vector extensions do not provide.

#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace {

constexpr int LANES = 16;      // environments per block: one AVX-512 register of float32
constexpr int MAX_SLOTS = 16;  // missile slots per side this kernel holds (checked on entry)

// Lane vectors (GCC/Clang vector extensions): arithmetic, comparisons (giving -1/0 masks of the
// same width) and `mask ? a : b` are elementwise, so the physics (physics.h) reads like the scalar
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

template <typename V>
inline V vclamp(V v, double lo, double hi) {
  typedef typename std::remove_reference<decltype(v[0])>::type T;
  v = v < T(lo) ? T(lo) : v;
  return v > T(hi) ? T(hi) : v;
}

}  // namespace
