// The matrix products of the recurrences' steps, C = added + A @ W^T with a small batch A (B x K,
// B about 1-128) and one weight W (N x K) used at every step: the weight is packed once per call
// into panels of 16 outputs, and each product then streams the panels through register tiles of
// R rows x 32 outputs (AVX-512) or R rows x 16 outputs (AVX2 + FMA), adding ``added`` and
// masking the last panel in the tile's epilogue. Used by the ``treernn`` GEMM backend
// (packed_gemm.cpp, treernn/kernels/gemm.py) and by the ON-LSTM sequence loops
// (onlstm_step.cpp), which call it from inside their own parallel region, one range of panels
// per thread.
//
// Layouts (row-major): float32 / float64 packed (P, K, 16), P = ceil(N / 16), element
// (p, k, i) = W[16 p + i, k] (zero beyond N). bf16 packed (P, K2, 16, 2), K2 = ceil(K / 2),
// element (p, k2, i, j) = bf16(W[16 p + i, 2 k2 + j]) (zero beyond N and K): the pairs that
// AVX512-BF16's vdpbf16ps multiplies and sums into one float32 lane. A bf16 operand A is given
// as pairs too: B rows of K2 32-bit words (zero-padded to even K). Sums run over k in order within
// each output, in float32 (float64 for float64), so results do not depend on the thread count.
//
// bf16 products run on AMX's tiles where the CPU has them and Linux grants them (``use_amx``;
// the same layouts are AMX's A and B tiles), else on AVX512-BF16. Instruction sets are chosen at
// run time (``detected_isa``); the build itself stays portable (no -march=native), and ``isa``
// arguments (bf16: ``set_amx``) force a lower one (the tests run every copy).
#pragma once

#include <c10/util/BFloat16.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "fast_math.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define TREERNN_X86_KERNELS 1
#define TREERNN_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma")))
#define TREERNN_AVX512_BF16 \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma")))
#define TREERNN_AVX2 __attribute__((target("avx2,fma")))
// AMX's tiles: Linux (the process asks for the tile state) and a compiler with AMX intrinsics
// (GCC 11, clang 12); elsewhere the bf16 products stay on AVX512-BF16 and the rest builds as before
#if defined(__linux__) && \
    ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && __GNUC__ >= 11))
#define TREERNN_AMX_KERNELS 1
#define TREERNN_AMX_BF16                                                                  \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma,amx-tile," \
                        "amx-bf16")))
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#endif

namespace {

constexpr int64_t kPanel = 16;

enum Isa : int64_t { kIsaAuto = 0, kIsaScalar = 1, kIsaAvx2 = 2, kIsaAvx512 = 3 };

// The best float32 instruction set of this CPU for the products.
int64_t detected_isa() {
#ifdef TREERNN_X86_KERNELS
  static const int64_t isa = __builtin_cpu_supports("avx512f")   ? kIsaAvx512
                             : (__builtin_cpu_supports("avx2") &&
                                __builtin_cpu_supports("fma")) ? kIsaAvx2
                                                               : kIsaScalar;
  return isa;
#else
  return kIsaScalar;
#endif
}

// Whether this CPU multiplies bf16 pairs (AVX512-BF16): the bf16 products need it.
bool cpu_has_bf16_pairs() {
#ifdef TREERNN_X86_KERNELS
  static const bool has = __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512bf16");
  return has;
#else
  return false;
#endif
}

// Whether this CPU has AMX's bf16 tiles (amx-tile, amx-bf16) and Linux lets this process use
// them (XTILEDATA is granted per process on request; oneDNN asks the same way). Asked once.
bool cpu_has_amx() {
#ifdef TREERNN_AMX_KERNELS
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;  // leaf 7: EDX bit 22 AMX-BF16, 24 AMX-TILE
    if (!cpu_has_bf16_pairs() || !__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) ||
        !(edx & (1u << 22)) || !(edx & (1u << 24)))
      return false;
    constexpr long kReqXcompPerm = 0x1023, kXtiledata = 18;  // arch_prctl, asm/prctl.h
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtiledata) == 0;
  }();
  return has;
#else
  return false;
#endif
}

// Whether the bf16 products use AMX where the CPU has it (set_amx turns it off, for the tests
// and the benchmarks: the AVX512-BF16 tiles then run). One flag per extension.
bool& amx_allowed() {
  static bool allowed = true;
  return allowed;
}

bool use_amx() { return amx_allowed() && cpu_has_amx(); }

// set_amx(allowed): returns the previous setting.
bool set_amx(bool allowed) {
  const bool before = amx_allowed();
  amx_allowed() = allowed;
  return before;
}

// ``requested`` (kIsaAuto: the detected one), never above what the CPU has.
int64_t isa_for(int64_t requested) {
  const int64_t best = detected_isa();
  return requested == kIsaAuto ? best : std::min(requested, best);
}

int64_t panels_of(int64_t outputs) { return (outputs + kPanel - 1) / kPanel; }

// bf16 bits of x, rounded to nearest even (as torch's float -> bfloat16 conversion)
inline uint16_t bf16_bits(float x) { return c10::BFloat16(x).x; }

// ---- packing ----------------------------------------------------------------------------------

#ifdef TREERNN_X86_KERNELS
// The 16 x 16 block r (one row per register) transposed in registers: r[j] becomes column j.
TREERNN_AVX512 inline void transpose16x16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0x88);
    t[4 + i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0xdd);
    t[8 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0x88);
    t[12 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0xdd);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
    r[4 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0x88);
    r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xdd);
    r[12 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0xdd);
  }
}

// panel[k * 16 + i] = factor * rows[i * ld + k] for the 16 rows of a full panel, k in whole
// 16 x 16 blocks transposed in registers; returns the first k not packed.
TREERNN_AVX512 int64_t pack_rows_avx512(const float* rows, int64_t ld, int64_t depth,
                                        float factor, float* panel) {
  const __m512 scale = _mm512_set1_ps(factor);
  int64_t k = 0;
  for (; k + kPanel <= depth; k += kPanel) {
    __m512 r[16];
    for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(rows + i * ld + k);
    transpose16x16(r);
    for (int j = 0; j < 16; ++j)
      _mm512_storeu_ps(panel + (k + j) * kPanel, _mm512_mul_ps(r[j], scale));
  }
  return k;
}

// The 8 x 8 block r (one row per register) transposed in registers: r[j] becomes column j.
TREERNN_AVX2 inline void transpose8x8(__m256 r[8]) {
  __m256 t[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    r[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm256_permute2f128_ps(r[i], r[4 + i], 0x20);
    t[4 + i] = _mm256_permute2f128_ps(r[i], r[4 + i], 0x31);
  }
  for (int i = 0; i < 8; ++i) r[i] = t[i];
}

// pack_rows_avx512 with AVX2: each half of the panel's rows in 8 x 8 blocks.
TREERNN_AVX2 int64_t pack_rows_avx2(const float* rows, int64_t ld, int64_t depth, float factor,
                                    float* panel) {
  const __m256 scale = _mm256_set1_ps(factor);
  int64_t k = 0;
  for (; k + 8 <= depth; k += 8) {
    for (int half = 0; half < 2; ++half) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(rows + (8 * half + i) * ld + k);
      transpose8x8(r);
      for (int j = 0; j < 8; ++j)
        _mm256_storeu_ps(panel + (k + j) * kPanel + 8 * half, _mm256_mul_ps(r[j], scale));
    }
  }
  return k;
}
#endif

// The 16 rows of a full float32 panel, W[i, k] = rows[i * ld + k], packed as panel[k * 16 + i]
// = factor * W[i, k] (the same products in every branch: one multiplication by ``factor``).
// Transposed in registers where the CPU has AVX2 or AVX-512 (a small ON-LSTM layer's
// [W_ih | W_hh], 1088 x 512, on one Zen 3 thread: 0.10-0.12 ms against the scalar loop's
// 0.34-0.41).
inline void pack_full_panel(const float* rows, int64_t ld, int64_t depth, float factor,
                            float* panel) {
  int64_t k = 0;  // the columns the vector copy leaves (all of them without one) one by one
#ifdef TREERNN_X86_KERNELS
  const int64_t isa = detected_isa();
  if (isa == kIsaAvx512) k = pack_rows_avx512(rows, ld, depth, factor, panel);
  if (isa == kIsaAvx2) k = pack_rows_avx2(rows, ld, depth, factor, panel);
#endif
  for (; k < depth; ++k)
    for (int64_t i = 0; i < kPanel; ++i) panel[k * kPanel + i] = rows[i * ld + k] * factor;
}

// Panels [p0, p1) of W (N x K), W[n, k] = w[n * row_stride + k * col_stride] (a transposed view
// is packed as it is, reading along its contiguous direction).
template <typename T>
void pack_panels(const T* w, int64_t row_stride, int64_t col_stride, int64_t n_outputs,
                 int64_t depth, T* packed, int64_t p0, int64_t p1) {
  for (int64_t p = p0; p < p1; ++p) {
    T* panel = packed + p * depth * kPanel;
    const int64_t valid = std::min(kPanel, n_outputs - p * kPanel);
    if constexpr (std::is_same_v<T, float>) {
      if (col_stride == 1 && valid == kPanel) {  // contiguous rows of a full panel
        pack_full_panel(w + p * kPanel * row_stride, row_stride, depth, 1.0f, panel);
        continue;
      }
    }
    if (valid < kPanel) std::fill(panel, panel + depth * kPanel, T(0));
    if (row_stride == 1) {  // W[., k] contiguous: read along the outputs
      for (int64_t k = 0; k < depth; ++k)
        for (int64_t i = 0; i < valid; ++i)
          panel[k * kPanel + i] = w[(p * kPanel + i) + k * col_stride];
    } else {
      for (int64_t i = 0; i < valid; ++i) {
        const T* row = w + (p * kPanel + i) * row_stride;
        for (int64_t k = 0; k < depth; ++k) panel[k * kPanel + i] = row[k * col_stride];
      }
    }
  }
}

void pack_panels_bf16(const float* w, int64_t row_stride, int64_t col_stride, int64_t n_outputs,
                      int64_t depth, uint16_t* packed, int64_t p0, int64_t p1) {
  const int64_t pairs = (depth + 1) / 2;
  for (int64_t p = p0; p < p1; ++p) {
    uint16_t* panel = packed + p * pairs * kPanel * 2;
    std::fill(panel, panel + pairs * kPanel * 2, uint16_t(0));
    const int64_t valid = std::min(kPanel, n_outputs - p * kPanel);
    if (row_stride == 1) {
      for (int64_t k = 0; k < depth; ++k)
        for (int64_t i = 0; i < valid; ++i)
          panel[((k / 2) * kPanel + i) * 2 + k % 2] =
              bf16_bits(w[(p * kPanel + i) + k * col_stride]);
    } else {
      for (int64_t i = 0; i < valid; ++i) {
        const float* row = w + (p * kPanel + i) * row_stride;
        for (int64_t k = 0; k < depth; ++k)
          panel[((k / 2) * kPanel + i) * 2 + k % 2] = bf16_bits(row[k * col_stride]);
      }
    }
  }
}

#ifdef TREERNN_X86_KERNELS
// The bf16 bits of 16 floats, each in the low half of its 32-bit lane: rounded to nearest even by
// c10::BFloat16's integer rule (bits + 0x7fff + the kept part's lowest bit), so the same bits as
// bf16_bits for every number (NaNs aside: they stay NaNs).
TREERNN_AVX512 inline __m512i bf16_lanes(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff)));
  return _mm512_srli_epi32(rounded, 16);
}

// out[k] = bf16_bits(a[k]) for k in [0, depth), 16 at a time.
TREERNN_AVX512 inline void bf16_row_avx512(const float* a, int64_t depth, uint16_t* out) {
  int64_t k = 0;
  for (; k + 16 <= depth; k += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k),
                        _mm512_cvtepi32_epi16(bf16_lanes(_mm512_loadu_ps(a + k))));
  for (; k < depth; ++k) out[k] = bf16_bits(a[k]);
}
#endif

// Rows [begin, end) of A (rows x K, row stride lda) as bf16 pairs (row stride pairs = ceil(K/2)).
void to_bf16_pairs(const float* a, int64_t lda, int64_t depth, int64_t begin, int64_t end,
                   uint32_t* out) {
  const int64_t pairs = (depth + 1) / 2;
#ifdef TREERNN_X86_KERNELS
  static const bool avx512 = __builtin_cpu_supports("avx512f");
#else
  constexpr bool avx512 = false;
#endif
  for (int64_t r = begin; r < end; ++r) {
    uint16_t* row = reinterpret_cast<uint16_t*>(out + r * pairs);
#ifdef TREERNN_X86_KERNELS
    if (avx512) {
      bf16_row_avx512(a + r * lda, depth, row);
    } else
#endif
    {
      for (int64_t k = 0; k < depth; ++k) row[k] = bf16_bits(a[r * lda + k]);
    }
    if (depth % 2) row[depth] = 0;
  }
}

// ---- the products -----------------------------------------------------------------------------

// What one call computes: C[b, n] = added[b, n] (if given) + sum_k A[b, k] W[n, k] for all rows b
// and the outputs of panels [p0, p1).
template <typename A_t, typename W_t, typename C_t>
struct Product {
  const A_t* a;          // rows x lda
  int64_t lda;           // in elements of A_t (bf16: pairs)
  int64_t rows;
  int64_t depth;         // K (bf16: pairs)
  const W_t* packed;     // panels of depth x 16 (bf16: pairs x 16 words)
  int64_t n_outputs;     // N
  C_t* c;
  int64_t ldc;
  const C_t* added;      // or null; may equal c (in place)
  int64_t ld_added;
  int64_t max_rows = 12;  // rows per register tile: fewer where long rows of A crowd the L1 cache
};

// Any type, any CPU: the reference copy (float64, and CPUs without AVX2).
template <typename T>
void product_scalar(const Product<T, T, T>& m, int64_t p0, int64_t p1) {
  T acc[kPanel];
  for (int64_t p = p0; p < p1; ++p) {
    const T* panel = m.packed + p * m.depth * kPanel;
    const int64_t valid = std::min(kPanel, m.n_outputs - p * kPanel);
    for (int64_t r = 0; r < m.rows; ++r) {
      for (int64_t i = 0; i < kPanel; ++i) acc[i] = 0;
      const T* a = m.a + r * m.lda;
      for (int64_t k = 0; k < m.depth; ++k)
        for (int64_t i = 0; i < kPanel; ++i) acc[i] += a[k] * panel[k * kPanel + i];
      T* out = m.c + r * m.ldc + p * kPanel;
      const T* added = m.added == nullptr ? nullptr : m.added + r * m.ld_added + p * kPanel;
      for (int64_t i = 0; i < valid; ++i) out[i] = (added ? added[i] : T(0)) + acc[i];
    }
  }
}

// Row blocks of about equal size, at most max_rows each: calls block(first_row, rows).
template <typename F>
TREERNN_INLINE void row_blocks(int64_t rows, int64_t max_rows, F&& block) {
  const int64_t count = (rows + max_rows - 1) / max_rows;
  int64_t first = 0;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t size = (rows - first) / (count - i) + ((rows - first) % (count - i) != 0);
    block(first, size);
    first += size;
  }
}

#ifdef TREERNN_X86_KERNELS

// ---- AVX-512, float32: tiles of R rows x 2 panels (2R accumulators) -------------------------

TREERNN_AVX512 inline __mmask16 tail_mask(int64_t valid) {
  return valid >= kPanel ? __mmask16(0xFFFF) : __mmask16((1u << std::max<int64_t>(valid, 0)) - 1);
}

// A tile's epilogue: rows [row, row + R) of panels p and p + 1 (if ``two``), plus ``added``,
// stored with the last panel's outputs masked.
template <int R, typename M>
TREERNN_AVX512 inline void store_tile(const M& m, int64_t row, int64_t p, bool two,
                                      __m512* acc0, __m512* acc1) {
  const int64_t col = p * kPanel;
  const __mmask16 mask0 = tail_mask(m.n_outputs - col);
  const __mmask16 mask1 = two ? tail_mask(m.n_outputs - col - kPanel) : __mmask16(0);
  for (int r = 0; r < R; ++r) {
    float* out = m.c + (row + r) * m.ldc + col;
    if (m.added != nullptr) {
      const float* added = m.added + (row + r) * m.ld_added + col;
      acc0[r] = _mm512_add_ps(acc0[r], _mm512_maskz_loadu_ps(mask0, added));
      acc1[r] = _mm512_add_ps(acc1[r], _mm512_maskz_loadu_ps(mask1, added + kPanel));
    }
    _mm512_mask_storeu_ps(out, mask0, acc0[r]);
    _mm512_mask_storeu_ps(out + kPanel, mask1, acc1[r]);
  }
}

// Tiles of R rows x P panels (P = 2, or 4 while four panels are left; PR accumulators); with
// P = 2 and not ``two`` the second panel reads the first again and its stores are masked off.
// Per k, P weight loads and R broadcasts for PR FMAs: 4 x 6 issues 0.42 loads an FMA against
// 0.63 for 2 x 8 (this Xeon's cores, and Zen's, issue at most two FMAs and two to three loads a
// cycle), and ON-LSTM's one-layer inference loop ran 1.04-1.10x faster with it (Intel Xeon
// family 6 model 207; docs/recurrence_speed.md as of 8148193). Every output's sum runs over
// k in the same order whatever the tile, so all give the same bits.
constexpr int64_t kQuadRows = 6;

template <int P, int R>
TREERNN_AVX512 void tile_panels(const Product<float, float, float>& m, int64_t row, int64_t p,
                                bool two) {
  __m512 acc[P][R];
  for (int j = 0; j < P; ++j)
    for (int r = 0; r < R; ++r) acc[j][r] = _mm512_setzero_ps();
  const float* w = m.packed + p * m.depth * kPanel;
  const int64_t stride = two ? m.depth * kPanel : 0;  // one panel
  const float* a = m.a + row * m.lda;
  for (int64_t k = 0; k < m.depth; ++k) {
    __m512 b[P];
    for (int j = 0; j < P; ++j) b[j] = _mm512_loadu_ps(w + j * stride + k * kPanel);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(a[r * m.lda + k]);
      for (int j = 0; j < P; ++j) acc[j][r] = _mm512_fmadd_ps(x, b[j], acc[j][r]);
    }
  }
  for (int j = 0; j < P; j += 2) store_tile<R>(m, row, p + j, two, acc[j], acc[j + 1]);
}

template <int R>
TREERNN_AVX512 void tile_avx512(const Product<float, float, float>& m, int64_t row, int64_t p,
                                bool two) {
  tile_panels<2, R>(m, row, p, two);
}

template <int R>
TREERNN_AVX512 void tile_quad(const Product<float, float, float>& m, int64_t row, int64_t p) {
  tile_panels<4, R>(m, row, p, true);
}

// The same over bf16 pairs (vdpbf16ps: two products per float32 lane), float32 results.
template <int R>
TREERNN_AVX512_BF16 void tile_avx512_bf16(const Product<uint32_t, uint32_t, float>& m,
                                          int64_t row, int64_t p, bool two) {
  __m512 acc0[R], acc1[R];
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm512_setzero_ps();
  const uint32_t* w0 = m.packed + p * m.depth * kPanel;
  const uint32_t* w1 = two ? w0 + m.depth * kPanel : w0;
  const uint32_t* a = m.a + row * m.lda;
  for (int64_t k = 0; k < m.depth; ++k) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(w0 + k * kPanel);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(w1 + k * kPanel);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const __m512bh x = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[r * m.lda + k]));
      acc0[r] = _mm512_dpbf16_ps(acc0[r], x, b0);
      acc1[r] = _mm512_dpbf16_ps(acc1[r], x, b1);
    }
  }
  store_tile<R>(m, row, p, two, acc0, acc1);
}

template <typename M, typename Tile>
TREERNN_INLINE void pairs_of_panels(const M& m, int64_t p0, int64_t p1, Tile&& tile) {
  const int64_t panels = panels_of(m.n_outputs);
  for (int64_t p = p0; p < p1; p += 2) {
    const bool two = p + 1 < std::min(p1, panels);
    row_blocks(m.rows, std::min<int64_t>(m.max_rows, 12),
               [&](int64_t row, int64_t size) { tile(row, size, p, two); });
  }
}

// The tiles of 1..12 rows, called through a table (one indirect call per tile).
template <typename M>
using TileFunction = void (*)(const M&, int64_t, int64_t, bool);

template <typename M>
void product_in_tiles(const M& m, int64_t p0, int64_t p1, const TileFunction<M>* tiles) {
  pairs_of_panels(m, p0, p1, [&](int64_t row, int64_t size, int64_t p, bool two) {
    tiles[size - 1](m, row, p, two);
  });
}

#define TREERNN_TILES(tile) \
  {tile<1>, tile<2>, tile<3>, tile<4>, tile<5>, tile<6>, tile<7>, tile<8>, tile<9>, tile<10>, \
   tile<11>, tile<12>}

using QuadFunction = void (*)(const Product<float, float, float>&, int64_t, int64_t);

// Panels [p0, p1): four at a time while four are left, the rest two at a time.
void product_avx512(const Product<float, float, float>& m, int64_t p0, int64_t p1) {
  static const TileFunction<Product<float, float, float>> tiles[] = TREERNN_TILES(tile_avx512);
  static const QuadFunction quads[kQuadRows] = {tile_quad<1>, tile_quad<2>, tile_quad<3>,
                                                tile_quad<4>, tile_quad<5>, tile_quad<6>};
  const int64_t whole = std::min(p1, panels_of(m.n_outputs));
  const int64_t rows = std::min(m.max_rows, kQuadRows);
  int64_t p = p0;
  for (; p + 4 <= whole; p += 4)
    row_blocks(m.rows, rows, [&](int64_t row, int64_t size) { quads[size - 1](m, row, p); });
  if (p < p1) product_in_tiles(m, p, p1, tiles);
}

void product_avx512_bf16(const Product<uint32_t, uint32_t, float>& m, int64_t p0, int64_t p1) {
  static const TileFunction<Product<uint32_t, uint32_t, float>> tiles[] =
      TREERNN_TILES(tile_avx512_bf16);
  product_in_tiles(m, p0, p1, tiles);
}

#ifdef TREERNN_AMX_KERNELS
// ---- AMX, bf16 pairs: blocks of up to 32 rows x 2 panels in four 16 x 16 float32 tiles ---------
//
// The packed panels are already AMX's B layout: a panel's rows of 16 pairs (64 bytes) for k pairs
// k2, k2 + 1, ... are 64 bytes apart, so 16 of them are one B tile; 16 pairs of 16 rows of A (rows
// lda words apart) are one A tile. Tiles: 0-3 the sums (row blocks 0 and 1 x panels p and p + 1),
// 4-5 A (row blocks 0 and 1), 6-7 B (panels p and p + 1). The last depth % 16 pairs, the added
// term and the masked stores run in the epilogue on AVX512-BF16, from the sums stored to a buffer.
// Sums in float32 as the AVX512-BF16 tiles' (another order within each 32-k block).

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

TREERNN_AMX_BF16 void amx_block(const Product<uint32_t, uint32_t, float>& m, int64_t row,
                                int64_t rows0, int64_t rows1, int64_t p0, int64_t p1) {
  TileConfig config;
  for (int t = 0; t < 8; ++t) config.colsb[t] = 64;
  config.rows[0] = config.rows[1] = config.rows[4] = static_cast<uint8_t>(rows0);
  config.rows[2] = config.rows[3] = config.rows[5] = static_cast<uint8_t>(rows1);
  if (rows1 == 0) config.colsb[2] = config.colsb[3] = config.colsb[5] = 0;
  config.rows[6] = config.rows[7] = 16;
  _tile_loadconfig(&config);
  const int64_t panels = panels_of(m.n_outputs);
  const int64_t blocks = m.depth / 16, rest = blocks * 16;
  const int64_t stride = m.lda * 4;
  const uint32_t* a0 = m.a + row * m.lda;
  const uint32_t* a1 = a0 + 16 * m.lda;
  alignas(64) float sums[4][16 * 16];
  for (int64_t p = p0; p < p1; p += 2) {
    const bool two = p + 1 < std::min(p1, panels);
    const uint32_t* w0 = m.packed + p * m.depth * kPanel;
    const uint32_t* w1 = two ? w0 + m.depth * kPanel : w0;
    _tile_zero(0);
    _tile_zero(1);
    if (rows1) {
      _tile_zero(2);
      _tile_zero(3);
    }
    for (int64_t b = 0; b < blocks; ++b) {
      _tile_loadd(4, a0 + b * 16, stride);
      _tile_loadd(6, w0 + b * 16 * kPanel, 64);
      _tile_dpbf16ps(0, 4, 6);
      if (two) {
        _tile_loadd(7, w1 + b * 16 * kPanel, 64);
        _tile_dpbf16ps(1, 4, 7);
      }
      if (rows1) {
        _tile_loadd(5, a1 + b * 16, stride);
        _tile_dpbf16ps(2, 5, 6);
        if (two) _tile_dpbf16ps(3, 5, 7);
      }
    }
    _tile_stored(0, sums[0], 64);
    if (two) _tile_stored(1, sums[1], 64);
    if (rows1) {
      _tile_stored(2, sums[2], 64);
      if (two) _tile_stored(3, sums[3], 64);
    }
    for (int q = 0; q < (two ? 2 : 1); ++q) {
      const uint32_t* w = q ? w1 : w0;
      const int64_t col = (p + q) * kPanel;
      const __mmask16 mask = tail_mask(m.n_outputs - col);
      for (int64_t r = 0; r < rows0 + rows1; ++r) {
        const int64_t block = r < rows0 ? 0 : 1, in_block = r < rows0 ? r : r - rows0;
        __m512 acc = _mm512_load_ps(sums[2 * block + q] + in_block * 16);
        const uint32_t* a = m.a + (row + r) * m.lda;
        for (int64_t k = rest; k < m.depth; ++k)
          acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_set1_epi32(static_cast<int>(a[k])),
                                 (__m512bh)_mm512_loadu_si512(w + k * kPanel));
        if (m.added != nullptr) {
          const float* added = m.added + (row + r) * m.ld_added + col;
          acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(mask, added));
        }
        _mm512_mask_storeu_ps(m.c + (row + r) * m.ldc + col, mask, acc);
      }
    }
  }
  _tile_release();
}

void product_amx_bf16(const Product<uint32_t, uint32_t, float>& m, int64_t p0, int64_t p1) {
  for (int64_t row = 0; row < m.rows; row += 32) {
    const int64_t rows = std::min<int64_t>(32, m.rows - row);
    const int64_t rows0 = std::min<int64_t>(16, rows);
    amx_block(m, row, rows0, rows - rows0, p0, p1);
  }
}
#endif  // TREERNN_AMX_KERNELS

// ---- AVX2 + FMA, float32: tiles of R rows x 1 panel (2 x 8 lanes, 2R accumulators) -----------
// The accumulators are read back only at constant indices (the unrolled copy into ``sums``): with
// an epilogue that indexed them by a run-time row, GCC 12 kept them in registers but also stored
// all 2R of them to the stack at every k, 12 stores per 12 FMAs (the AVX2 tiles ran at 46-52
// GFLOP/s on a 2-core AMD Zen 3 where oneDNN ran the same products at 60-140).

// Each k of a tile also asks for the panel's line kAvx2Prefetch k ahead (4 KiB; past the panel's
// end, the next panel's first lines): the hardware prefetchers alone left the first row tile of
// each panel waiting on L3 or memory. Distance and block sizes from the step shapes' products
// timed in turn on a 2-core AMD Zen 3, 1.3-1.4x (20 x 1150 x 4830: 63-70 -> 89-94 GFLOP/s;
// docs/recurrence_speed.md as of 8148193).
constexpr int64_t kAvx2Prefetch = 64;
constexpr int64_t kAvx2KBlock = 128;
constexpr int64_t kAvx2BlockedRows = 64;
constexpr int64_t kAvx2BlockedDepth = 512;
// k per trip of a tile's loop: a trip of one k spent a fifth of its instructions on the loop and
// on addressing, and the tile ran 8 % slower than with four (6 x 512 x 16 on a Zen 3, hot panel)
constexpr int kAvx2Unroll = 4;

// One k of a tile: the panel's line kAvx2Prefetch k ahead asked for, its 16 weights times each
// row's k-th value added to the row's sums.
template <int R>
TREERNN_AVX2 TREERNN_INLINE void avx2_k_step(const float* w, const float* a, int64_t lda,
                                             int64_t k, __m256* acc0, __m256* acc1) {
  _mm_prefetch(reinterpret_cast<const char*>(w + (k + kAvx2Prefetch) * kPanel), _MM_HINT_T0);
  const __m256 b0 = _mm256_loadu_ps(w + k * kPanel);
  const __m256 b1 = _mm256_loadu_ps(w + k * kPanel + 8);
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    const __m256 x = _mm256_broadcast_ss(a + r * lda + k);
    acc0[r] = _mm256_fmadd_ps(x, b0, acc0[r]);
    acc1[r] = _mm256_fmadd_ps(x, b1, acc1[r]);
  }
}

// Rows [row, row + R) of panel p over k in [k0, k1): sums start at zero (``first``) or from
// ``partial`` (R x 16); at ``last`` they go to C (plus ``added``), else back to ``partial``.
template <int R>
TREERNN_AVX2 void tile_avx2(const Product<float, float, float>& m, int64_t row, int64_t p,
                            int64_t k0, int64_t k1, bool first, bool last, float* partial) {
  __m256 acc0[R], acc1[R];
  if (first) {
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm256_setzero_ps();
  } else {
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      acc0[r] = _mm256_loadu_ps(partial + r * kPanel);
      acc1[r] = _mm256_loadu_ps(partial + r * kPanel + 8);
    }
  }
  const float* w = m.packed + p * m.depth * kPanel;
  const float* a = m.a + row * m.lda;
  // k in steps of kAvx2Unroll, then one at a time: the same sums in the same order
  int64_t k = k0;
  for (; k + kAvx2Unroll <= k1; k += kAvx2Unroll) {
#pragma GCC unroll 4
    for (int u = 0; u < kAvx2Unroll; ++u) avx2_k_step<R>(w, a, m.lda, k + u, acc0, acc1);
  }
  for (; k < k1; ++k) avx2_k_step<R>(w, a, m.lda, k, acc0, acc1);
  if (!last) {
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      _mm256_storeu_ps(partial + r * kPanel, acc0[r]);
      _mm256_storeu_ps(partial + r * kPanel + 8, acc1[r]);
    }
    return;
  }
  alignas(32) float sums[R][kPanel];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    _mm256_store_ps(sums[r], acc0[r]);
    _mm256_store_ps(sums[r] + 8, acc1[r]);
  }
  const int64_t col = p * kPanel;
  const int64_t valid = std::min(kPanel, m.n_outputs - col);
  for (int r = 0; r < R; ++r) {
    float* out = m.c + (row + r) * m.ldc + col;
    const float* added = m.added == nullptr ? nullptr : m.added + (row + r) * m.ld_added + col;
    for (int64_t i = 0; i < valid; ++i) out[i] = (added ? added[i] : 0.0f) + sums[r][i];
  }
}

// Panels [p0, p1). A step's product (at most kAvx2BlockedRows rows) with a deep weight runs each
// panel in blocks of kAvx2KBlock k, all its row tiles over one block before the next (the sums
// carried in ``partials``, float32 as in registers: the same bits), so that each line of the
// weight, fetched once from L3 or memory, serves every row from L1; many rows (the input
// projections over all steps) or a shallow weight keep one pass of each row tile over the whole
// panel.
void product_avx2(const Product<float, float, float>& m, int64_t p0, int64_t p1) {
  const bool blocked = m.rows <= kAvx2BlockedRows && m.depth > kAvx2BlockedDepth;
  const int64_t kb = blocked ? kAvx2KBlock : m.depth;
  alignas(32) float partials[kAvx2BlockedRows * kPanel];
  for (int64_t p = p0; p < p1; ++p) {
    for (int64_t k0 = 0; k0 < m.depth; k0 += kb) {
      const int64_t k1 = std::min(m.depth, k0 + kb);
      const bool first = k0 == 0, last = k1 == m.depth;
      row_blocks(m.rows, 6, [&](int64_t row, int64_t size) {
        float* part = blocked ? partials + row * kPanel : nullptr;
        switch (size) {
          case 1: return tile_avx2<1>(m, row, p, k0, k1, first, last, part);
          case 2: return tile_avx2<2>(m, row, p, k0, k1, first, last, part);
          case 3: return tile_avx2<3>(m, row, p, k0, k1, first, last, part);
          case 4: return tile_avx2<4>(m, row, p, k0, k1, first, last, part);
          case 5: return tile_avx2<5>(m, row, p, k0, k1, first, last, part);
          default: return tile_avx2<6>(m, row, p, k0, k1, first, last, part);
        }
      });
    }
  }
}

#endif  // TREERNN_X86_KERNELS

// Panels [p0, p1) of a float32 or float64 product on instruction set ``isa`` (float64: scalar).
template <typename T>
void product_panels(const Product<T, T, T>& m, int64_t p0, int64_t p1, int64_t isa) {
#ifdef TREERNN_X86_KERNELS
  if constexpr (std::is_same_v<T, float>) {
    if (isa == kIsaAvx512) return product_avx512(m, p0, p1);
    if (isa == kIsaAvx2) return product_avx2(m, p0, p1);
  }
#endif
  product_scalar(m, p0, p1);
}

// Panels [p0, p1) of a bf16 product (callers check cpu_has_bf16_pairs first): on AMX's tiles
// where the CPU has them (use_amx), else on AVX512-BF16.
void product_panels_bf16(const Product<uint32_t, uint32_t, float>& m, int64_t p0, int64_t p1) {
#ifdef TREERNN_X86_KERNELS
#ifdef TREERNN_AMX_KERNELS
  if (use_amx()) return product_amx_bf16(m, p0, p1);
#endif
  product_avx512_bf16(m, p0, p1);
#endif
}

// This thread's share of a product's panels, in pairs (the AVX-512 tiles take two at a time).
struct PanelRange {
  int64_t begin, end;
};

PanelRange panel_share(int64_t n_outputs, int64_t thread, int64_t threads) {
  const int64_t pairs = (panels_of(n_outputs) + 1) / 2;
  const int64_t first = pairs * thread / threads, last = pairs * (thread + 1) / threads;
  return {std::min(2 * first, panels_of(n_outputs)), std::min(2 * last, panels_of(n_outputs))};
}

}  // namespace
