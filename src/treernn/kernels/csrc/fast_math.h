// Elementwise math shared by the C++ kernels of the encoders (onlstm_step.cpp, om_chain.cpp):
// float32 approximations of exp, sigmoid and tanh that the compiler vectorises (within a few ulp of
// libm), libm for float64, and the run-time check for the AVX2 + FMA copies of the row loops.
// Included by one translation unit each (everything here has internal linkage).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace {

#if defined(__GNUC__) || defined(__clang__)
#define TREERNN_INLINE inline __attribute__((always_inline))
#else
#define TREERNN_INLINE inline
#endif

// ---- float32 approximations -------------------------------------------------------------------
// exp(y) = 2^k (1 + expm1(r)), y = k ln2 + r, |r| <= ln2 / 2; expm1(r) by its Taylor series to r^7
// (truncation error below 2e-8 relative). ln2 is split in two parts so that k * ln2_high is exact.

constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2High = 0.693145751953125f;
constexpr float kLn2Low = 1.42860682030941723e-06f;
constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds

struct Reduced {
  float scale;  // 2^k
  float expm1;  // e^r - 1
};

TREERNN_INLINE Reduced reduce_exp(float y) {
  const float k = (y * kLog2e + kRoundMagic) - kRoundMagic;
  const float r = (y - k * kLn2High) - k * kLn2Low;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(k) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return {scale, p * r};
}

// y in [-87, 87] (callers clamp): 2^k stays a normal number.
TREERNN_INLINE float exp_clamped(float y) {
  const Reduced e = reduce_exp(y);
  return e.scale * e.expm1 + e.scale;
}

TREERNN_INLINE float clamp(float x, float low, float high) {
  x = x < low ? low : x;
  return x > high ? high : x;
}

TREERNN_INLINE float sigmoid_of(float x) {
  return 1.0f / (1.0f + exp_clamped(clamp(-x, -87.0f, 87.0f)));
}

// tanh(x) = u / (u + 2) with u = e^(2x) - 1: no cancellation near 0 (u is computed as expm1), and
// tanh(+-10) already rounds to +-1 in float32.
TREERNN_INLINE float tanh_of(float x) {
  const Reduced e = reduce_exp(2.0f * clamp(x, -10.0f, 10.0f));
  const float u = e.scale * e.expm1 + (e.scale - 1.0f);
  return u / (u + 2.0f);
}

TREERNN_INLINE float exp_of(float x) { return exp_clamped(clamp(x, -87.0f, 87.0f)); }

// ---- float64: libm ----------------------------------------------------------------------------

TREERNN_INLINE double sigmoid_of(double x) { return 1.0 / (1.0 + std::exp(-x)); }
TREERNN_INLINE double tanh_of(double x) { return std::tanh(x); }
TREERNN_INLINE double exp_of(double x) { return std::exp(x); }

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TREERNN_HAS_AVX2_COPY 1
// Whether this CPU runs the row loops compiled with __attribute__((target("avx2,fma"))).
bool cpu_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}
// Whether it runs the copies compiled for AVX-512 (16 float32 lanes; the registers of an AMD Zen 4
// are 256 bits wide inside, but twice as many values per instruction still halve the front end's
// work).
[[maybe_unused]] bool cpu_has_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  return has;
}
#endif

}  // namespace
