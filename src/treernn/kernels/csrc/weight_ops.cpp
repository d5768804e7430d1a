// Whole-weight operations of the recurrences, once per call (treernn/kernels/weight_ops.py, which
// builds and calls them): DropConnect and the transposed copy that a backward pass packs.
//
// masked_scale(input, keep_probability, scale, seed): input * keep * scale, where keep is a
// Bernoulli(keep_probability) draw per element from the counter-based generator Philox4x32-10
// (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011; the generator of cuRAND
// and of torch's CUDA dropout). Element e of the flattened tensor takes word e % 4 of the block for
// counter e / 4 under the key ``seed``, and keeps when that word is below keep_probability * 2^32.
// So a draw depends only on (seed, e): the same call on the gradient regenerates the same mask in
// a backward pass (nothing saved), and threads split the elements in any way without changing it.
//
// transpose(input): the (C, R) contiguous copy of a (R, C) matrix, in cache-sized tiles (torch's
// strided copy_ of a transposed view walks one side a column at a time, several times slower).
//
// float32 and float64 CPU tensors, rows split over threads with at::parallel_for; on x86-64 the
// Philox words come from AVX-512 or AVX2 registers where the CPU has them (the same words as the
// scalar loop, which runs elsewhere).

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/csrc/utils/pybind.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "fast_math.h"

namespace {

// ---- Philox4x32-10 ----------------------------------------------------------------------------

constexpr uint32_t kMultiplier0 = 0xD2511F53u;
constexpr uint32_t kMultiplier1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u;  // the key schedule's increments
constexpr uint32_t kWeyl1 = 0xBB67AE85u;

// The four output words of counter (c0, c1, c2, c3) under key (k0, k1).
TREERNN_INLINE void philox(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                           uint32_t k1, uint32_t* out) {
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMultiplier0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kMultiplier1) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

constexpr int64_t kBlock = 64;  // counters per block: 256 words, 1 KB on the stack

// The words of the kBlock counters counter .. counter + kBlock - 1 under key (k0, k1), in element
// order (out[4 i + w] is word w of counter + i).
using BlockWords = void (*)(uint64_t counter, uint32_t k0, uint32_t k1, uint32_t* out);

void block_words_scalar(uint64_t counter, uint32_t k0, uint32_t k1, uint32_t* out) {
  for (int64_t i = 0; i < kBlock; ++i) {
    const uint64_t c = counter + static_cast<uint64_t>(i);
    philox(static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32), 0u, 0u, k0, k1, out + 4 * i);
  }
}

#ifdef TREERNN_HAS_AVX2_COPY
// The same words from SIMD registers: counters side by side in the lanes, the four words of a
// block in four registers. A 32 x 32 -> 64-bit product per lane comes from vpmuludq on the even
// lanes and on the odd lanes shifted down; four independent groups of registers per round hide
// the products' latency (3.4x the scalar loop with AVX-512 and 2.7x with AVX2 on a Zen 4; the
// words are bit for bit the scalar loop's: tests/unit/kernels/test_weight_ops.py).
#define WEIGHT_OPS_AVX2 __attribute__((target("avx2,fma")))
#define WEIGHT_OPS_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))
constexpr int kGroups = 4;

// The high words of counter + lane for lanes 0 .. lanes - 1 (they differ only where the low word
// wraps inside the register).
template <int lanes>
TREERNN_INLINE void high_words(uint64_t counter, uint32_t* out) {
  for (int i = 0; i < lanes; ++i) out[i] = static_cast<uint32_t>((counter + i) >> 32);
}

WEIGHT_OPS_AVX2 TREERNN_INLINE void product_avx2(__m256i a, __m256i m, __m256i& hi, __m256i& lo) {
  const __m256i even = _mm256_mul_epu32(a, m);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
  lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
  hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

// kGroups x 8 counters from counter on; called twice per block
WEIGHT_OPS_AVX2 void group_words_avx2(uint64_t counter, uint32_t k0, uint32_t k1, uint32_t* out) {
  __m256i c0[kGroups], c1[kGroups], c2[kGroups], c3[kGroups];
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int g = 0; g < kGroups; ++g) {
    const uint64_t first = counter + 8 * g;
    c0[g] = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(first)), lane);
    alignas(32) uint32_t high[8];
    high_words<8>(first, high);
    c1[g] = _mm256_load_si256(reinterpret_cast<const __m256i*>(high));
    c2[g] = c3[g] = _mm256_setzero_si256();
  }
  const __m256i m0 = _mm256_set1_epi32(static_cast<int>(kMultiplier0));
  const __m256i m1 = _mm256_set1_epi32(static_cast<int>(kMultiplier1));
  __m256i key0 = _mm256_set1_epi32(static_cast<int>(k0));
  __m256i key1 = _mm256_set1_epi32(static_cast<int>(k1));
  for (int round = 0; round < 10; ++round) {
    for (int g = 0; g < kGroups; ++g) {
      __m256i hi0, lo0, hi1, lo1;
      product_avx2(c0[g], m0, hi0, lo0);
      product_avx2(c2[g], m1, hi1, lo1);
      c0[g] = _mm256_xor_si256(_mm256_xor_si256(hi1, c1[g]), key0);
      c2[g] = _mm256_xor_si256(_mm256_xor_si256(hi0, c3[g]), key1);
      c1[g] = lo1;
      c3[g] = lo0;
    }
    key0 = _mm256_add_epi32(key0, _mm256_set1_epi32(static_cast<int>(kWeyl0)));
    key1 = _mm256_add_epi32(key1, _mm256_set1_epi32(static_cast<int>(kWeyl1)));
  }
  for (int g = 0; g < kGroups; ++g) {  // 4 x 8 words -> 8 x 4, in counter order
    const __m256i t0 = _mm256_unpacklo_epi32(c0[g], c1[g]), t1 = _mm256_unpacklo_epi32(c2[g], c3[g]);
    const __m256i t2 = _mm256_unpackhi_epi32(c0[g], c1[g]), t3 = _mm256_unpackhi_epi32(c2[g], c3[g]);
    const __m256i u0 = _mm256_unpacklo_epi64(t0, t1), u1 = _mm256_unpackhi_epi64(t0, t1);
    const __m256i u2 = _mm256_unpacklo_epi64(t2, t3), u3 = _mm256_unpackhi_epi64(t2, t3);
    auto* o = reinterpret_cast<__m256i*>(out + 32 * g);
    _mm256_storeu_si256(o, _mm256_permute2x128_si256(u0, u1, 0x20));      // counters 0, 1
    _mm256_storeu_si256(o + 1, _mm256_permute2x128_si256(u2, u3, 0x20));  // 2, 3
    _mm256_storeu_si256(o + 2, _mm256_permute2x128_si256(u0, u1, 0x31));  // 4, 5
    _mm256_storeu_si256(o + 3, _mm256_permute2x128_si256(u2, u3, 0x31));  // 6, 7
  }
}

WEIGHT_OPS_AVX2 void block_words_avx2(uint64_t counter, uint32_t k0, uint32_t k1, uint32_t* out) {
  group_words_avx2(counter, k0, k1, out);
  group_words_avx2(counter + 8 * kGroups, k0, k1, out + 32 * kGroups);
}

WEIGHT_OPS_AVX512 TREERNN_INLINE void product_avx512(__m512i a, __m512i m, __m512i& hi,
                                                     __m512i& lo) {
  const __m512i even = _mm512_mul_epu32(a, m);
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
  lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
  hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
}

// kGroups x 16 = kBlock counters
WEIGHT_OPS_AVX512 void block_words_avx512(uint64_t counter, uint32_t k0, uint32_t k1,
                                          uint32_t* out) {
  static_assert(16 * kGroups == kBlock, "one AVX-512 call makes a block");
  __m512i c0[kGroups], c1[kGroups], c2[kGroups], c3[kGroups];
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int g = 0; g < kGroups; ++g) {
    const uint64_t first = counter + 16 * g;
    c0[g] = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(first)), lane);
    alignas(64) uint32_t high[16];
    high_words<16>(first, high);
    c1[g] = _mm512_load_si512(high);
    c2[g] = c3[g] = _mm512_setzero_si512();
  }
  const __m512i m0 = _mm512_set1_epi32(static_cast<int>(kMultiplier0));
  const __m512i m1 = _mm512_set1_epi32(static_cast<int>(kMultiplier1));
  __m512i key0 = _mm512_set1_epi32(static_cast<int>(k0));
  __m512i key1 = _mm512_set1_epi32(static_cast<int>(k1));
  for (int round = 0; round < 10; ++round) {
    for (int g = 0; g < kGroups; ++g) {
      __m512i hi0, lo0, hi1, lo1;
      product_avx512(c0[g], m0, hi0, lo0);
      product_avx512(c2[g], m1, hi1, lo1);
      c0[g] = _mm512_ternarylogic_epi32(hi1, c1[g], key0, 0x96);  // a ^ b ^ c
      c2[g] = _mm512_ternarylogic_epi32(hi0, c3[g], key1, 0x96);
      c1[g] = lo1;
      c3[g] = lo0;
    }
    key0 = _mm512_add_epi32(key0, _mm512_set1_epi32(static_cast<int>(kWeyl0)));
    key1 = _mm512_add_epi32(key1, _mm512_set1_epi32(static_cast<int>(kWeyl1)));
  }
  for (int g = 0; g < kGroups; ++g) {  // 4 x 16 words -> 16 x 4, in counter order
    const __m512i t0 = _mm512_unpacklo_epi32(c0[g], c1[g]), t1 = _mm512_unpacklo_epi32(c2[g], c3[g]);
    const __m512i t2 = _mm512_unpackhi_epi32(c0[g], c1[g]), t3 = _mm512_unpackhi_epi32(c2[g], c3[g]);
    // u0 holds counters 0, 4, 8, 12 (one per 128-bit lane), u1 1, 5, 9, 13, ...
    const __m512i u0 = _mm512_unpacklo_epi64(t0, t1), u1 = _mm512_unpackhi_epi64(t0, t1);
    const __m512i u2 = _mm512_unpacklo_epi64(t2, t3), u3 = _mm512_unpackhi_epi64(t2, t3);
    const __m512i a = _mm512_shuffle_i32x4(u0, u1, _MM_SHUFFLE(1, 0, 1, 0));  // 0, 4, 1, 5
    const __m512i b = _mm512_shuffle_i32x4(u2, u3, _MM_SHUFFLE(1, 0, 1, 0));  // 2, 6, 3, 7
    const __m512i c = _mm512_shuffle_i32x4(u0, u1, _MM_SHUFFLE(3, 2, 3, 2));  // 8, 12, 9, 13
    const __m512i d = _mm512_shuffle_i32x4(u2, u3, _MM_SHUFFLE(3, 2, 3, 2));  // 10, 14, 11, 15
    uint32_t* o = out + 64 * g;
    _mm512_storeu_si512(o, _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)));       // 0-3
    _mm512_storeu_si512(o + 16, _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));  // 4-7
    _mm512_storeu_si512(o + 32, _mm512_shuffle_i32x4(c, d, _MM_SHUFFLE(2, 0, 2, 0)));  // 8-11
    _mm512_storeu_si512(o + 48, _mm512_shuffle_i32x4(c, d, _MM_SHUFFLE(3, 1, 3, 1)));  // 12-15
  }
}
#endif

// out[e - begin] = keep * scale * input[e - begin] for the flat elements e in [begin, end), the
// words of each block of kBlock counters from block_words. threshold <= 2^32: keep when
// word < threshold (2^32: every element).
template <typename scalar_t>
TREERNN_INLINE void masked_scale_range(const scalar_t* __restrict input, scalar_t* __restrict out,
                                       int64_t begin, int64_t end, uint64_t threshold,
                                       scalar_t scale, uint32_t k0, uint32_t k1,
                                       BlockWords block_words) {
  if (threshold > 0xFFFFFFFFull) {  // keep probability 1
    for (int64_t e = begin; e < end; ++e) out[e - begin] = input[e - begin] * scale;
    return;
  }
  const auto below = static_cast<uint32_t>(threshold);
  alignas(64) uint32_t words[4 * kBlock];
  int64_t counter = begin >> 2;
  const int64_t last = (end - 1) >> 2;
  while (counter <= last) {
    const int64_t count = std::min<int64_t>(kBlock, last - counter + 1);
    block_words(static_cast<uint64_t>(counter), k0, k1, words);
    const int64_t first = std::max<int64_t>(begin, counter << 2);
    const int64_t stop = std::min<int64_t>(end, (counter + count) << 2);
    const uint32_t* word = words - (counter << 2);
    for (int64_t e = first; e < stop; ++e) {
      const scalar_t keep = word[e] < below ? scale : scalar_t(0);
      out[e - begin] = input[e - begin] * keep;
    }
    counter += count;
  }
}

#ifdef TREERNN_HAS_AVX2_COPY
template <typename scalar_t>
WEIGHT_OPS_AVX512 void masked_scale_avx512(const scalar_t* input, scalar_t* out, int64_t begin,
                                           int64_t end, uint64_t threshold, scalar_t scale,
                                           uint32_t k0, uint32_t k1) {
  masked_scale_range(input, out, begin, end, threshold, scale, k0, k1, block_words_avx512);
}

template <typename scalar_t>
WEIGHT_OPS_AVX2 void masked_scale_avx2(const scalar_t* input, scalar_t* out, int64_t begin,
                                       int64_t end, uint64_t threshold, scalar_t scale,
                                       uint32_t k0, uint32_t k1) {
  masked_scale_range(input, out, begin, end, threshold, scale, k0, k1, block_words_avx2);
}
#endif

template <typename scalar_t>
void masked_scale_baseline(const scalar_t* input, scalar_t* out, int64_t begin, int64_t end,
                           uint64_t threshold, scalar_t scale, uint32_t k0, uint32_t k1) {
  masked_scale_range(input, out, begin, end, threshold, scale, k0, k1, block_words_scalar);
}

void check_input(const at::Tensor& input) {
  TORCH_CHECK(input.device().is_cpu(), "weight_ops: a CPU tensor is needed, got ", input.device());
  TORCH_CHECK(input.scalar_type() == at::kFloat || input.scalar_type() == at::kDouble,
              "weight_ops: float32 or float64 is needed, got ", input.scalar_type());
}

at::Tensor masked_scale(const at::Tensor& input, double keep_probability, double scale,
                        int64_t seed) {
  check_input(input);
  TORCH_CHECK(keep_probability >= 0.0 && keep_probability <= 1.0,
              "keep_probability must be in [0, 1], got ", keep_probability);
  const at::Tensor source = input.contiguous();
  at::Tensor out = at::empty(source.sizes(), source.options());
  const int64_t size = source.numel();
  if (size == 0) return out;
  // keep when word < threshold: P(keep) = floor(p 2^32) / 2^32, within 2.4e-10 of p
  const uint64_t threshold = static_cast<uint64_t>(keep_probability * 4294967296.0);
  const auto key = static_cast<uint64_t>(seed);
  const uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  AT_DISPATCH_FLOATING_TYPES(source.scalar_type(), "weight_ops_masked_scale", [&] {
    const scalar_t* in = source.data_ptr<scalar_t>();
    scalar_t* result = out.data_ptr<scalar_t>();
    const auto factor = static_cast<scalar_t>(scale);
    at::parallel_for(0, size, 1 << 15, [&](int64_t begin, int64_t end) {
#ifdef TREERNN_HAS_AVX2_COPY
      if (cpu_has_avx512())
        return masked_scale_avx512(in + begin, result + begin, begin, end, threshold, factor, k0,
                                   k1);
      if (cpu_has_avx2())
        return masked_scale_avx2(in + begin, result + begin, begin, end, threshold, factor, k0,
                                 k1);
#endif
      masked_scale_baseline(in + begin, result + begin, begin, end, threshold, factor, k0, k1);
    });
  });
  return out;
}

// ---- transpose --------------------------------------------------------------------------------

at::Tensor transpose(const at::Tensor& input) {
  check_input(input);
  TORCH_CHECK(input.dim() == 2, "transpose: a 2-D tensor is needed, got ", input.sizes());
  const at::Tensor source = input.contiguous();
  const int64_t rows = source.size(0), columns = source.size(1);
  at::Tensor out = at::empty({columns, rows}, source.options());
  // Tiles of kTile x kTile: read row by row into a local buffer (contiguous reads), written out
  // row by row of the result (contiguous writes); the strided walk stays inside L1.
  constexpr int64_t kTile = 64;
  AT_DISPATCH_FLOATING_TYPES(source.scalar_type(), "weight_ops_transpose", [&] {
    const scalar_t* in = source.data_ptr<scalar_t>();
    scalar_t* result = out.data_ptr<scalar_t>();
    const int64_t row_tiles = (rows + kTile - 1) / kTile;
    at::parallel_for(0, row_tiles, 1, [&](int64_t begin, int64_t end) {
      scalar_t buffer[kTile * kTile];
      for (int64_t tile = begin; tile < end; ++tile) {
        const int64_t r0 = tile * kTile, height = std::min(kTile, rows - r0);
        for (int64_t c0 = 0; c0 < columns; c0 += kTile) {
          const int64_t width = std::min(kTile, columns - c0);
          for (int64_t r = 0; r < height; ++r)
            std::copy_n(in + (r0 + r) * columns + c0, width, buffer + r * kTile);
          for (int64_t c = 0; c < width; ++c) {
            scalar_t* row = result + (c0 + c) * rows + r0;
            for (int64_t r = 0; r < height; ++r) row[r] = buffer[r * kTile + c];
          }
        }
      }
    });
  });
  return out;
}

// The four words of one Philox4x32-10 block (for the known-answer tests).
std::array<uint32_t, 4> philox_block(const std::array<uint32_t, 4>& counter,
                                     const std::array<uint32_t, 2>& key) {
  std::array<uint32_t, 4> out{};
  philox(counter[0], counter[1], counter[2], counter[3], key[0], key[1], out.data());
  return out;
}

// The 4 x kBlock words of the block of counters counter .. counter + kBlock - 1 from one
// implementation ("scalar", "avx2", "avx512"; for the tests that compare them).
std::vector<uint32_t> block_words(uint64_t counter, const std::array<uint32_t, 2>& key,
                                  const std::string& isa) {
  BlockWords words = block_words_scalar;
#ifdef TREERNN_HAS_AVX2_COPY
  if (isa == "avx2" && cpu_has_avx2()) words = block_words_avx2;
  if (isa == "avx512" && cpu_has_avx512()) words = block_words_avx512;
#endif
  TORCH_CHECK(isa == "scalar" || words != block_words_scalar, "block_words: ", isa,
              " does not run on this CPU (or this build); choose from scalar, avx2, avx512");
  std::vector<uint32_t> out(4 * kBlock);
  words(counter, key[0], key[1], out.data());
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Whole-weight operations of the recurrences (treernn.kernels.weight_ops).";
  m.def("masked_scale", &masked_scale,
        "input * Bernoulli(keep_probability) * scale, the mask drawn by Philox4x32-10 from seed.",
        pybind11::arg("input"), pybind11::arg("keep_probability"), pybind11::arg("scale"),
        pybind11::arg("seed"));
  m.def("transpose", &transpose, "The contiguous transposed copy of a 2-D tensor.",
        pybind11::arg("input"));
  m.def("block_words", &block_words,
        "The words of kBlock counters from one implementation (scalar, avx2, avx512).",
        pybind11::arg("counter"), pybind11::arg("key"), pybind11::arg("isa"));
  m.def("philox_block", &philox_block, "One Philox4x32-10 block: four words of (counter, key).",
        pybind11::arg("counter"), pybind11::arg("key"));
}
