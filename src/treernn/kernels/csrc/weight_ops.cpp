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
// float32 and float64 CPU tensors, rows split over threads with at::parallel_for; the Philox
// loop is compiled twice on x86-64 (AVX2 and baseline), as in the other kernels.

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <array>
#include <cstdint>
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

// out[e - begin] = keep * scale * input[e - begin] for the flat elements e in [begin, end).
template <typename scalar_t>
TREERNN_INLINE void masked_scale_range(const scalar_t* __restrict input, scalar_t* __restrict out,
                                       int64_t begin, int64_t end, uint64_t threshold,
                                       scalar_t scale, uint32_t k0, uint32_t k1) {
  // Blocks of 64 counters (256 elements): the generator loop has no dependence between
  // counters, so the compiler vectorises it; the elements then read the words back.
  constexpr int64_t kBlock = 64;
  uint32_t words[4 * kBlock];
  int64_t counter = begin >> 2;
  const int64_t last = (end - 1) >> 2;
  while (counter <= last) {
    const int64_t count = std::min<int64_t>(kBlock, last - counter + 1);
    for (int64_t i = 0; i < count; ++i) {
      const uint64_t c = static_cast<uint64_t>(counter + i);
      philox(static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32), 0u, 0u, k0, k1,
             words + 4 * i);
    }
    const int64_t first = std::max<int64_t>(begin, counter << 2);
    const int64_t stop = std::min<int64_t>(end, (counter + count) << 2);
    const uint32_t* word = words - (counter << 2);
    for (int64_t e = first; e < stop; ++e) {
      const scalar_t keep = static_cast<uint64_t>(word[e]) < threshold ? scale : scalar_t(0);
      out[e - begin] = input[e - begin] * keep;
    }
    counter += count;
  }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
template <typename scalar_t>
__attribute__((target("avx2,fma"))) void masked_scale_avx2(const scalar_t* input, scalar_t* out,
                                                           int64_t begin, int64_t end,
                                                           uint64_t threshold, scalar_t scale,
                                                           uint32_t k0, uint32_t k1) {
  masked_scale_range(input, out, begin, end, threshold, scale, k0, k1);
}
#endif

template <typename scalar_t>
void masked_scale_baseline(const scalar_t* input, scalar_t* out, int64_t begin, int64_t end,
                           uint64_t threshold, scalar_t scale, uint32_t k0, uint32_t k1) {
  masked_scale_range(input, out, begin, end, threshold, scale, k0, k1);
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

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Whole-weight operations of the recurrences (treernn.kernels.weight_ops).";
  m.def("masked_scale", &masked_scale,
        "input * Bernoulli(keep_probability) * scale, the mask drawn by Philox4x32-10 from seed.",
        pybind11::arg("input"), pybind11::arg("keep_probability"), pybind11::arg("scale"),
        pybind11::arg("seed"));
  m.def("transpose", &transpose, "The contiguous transposed copy of a 2-D tensor.",
        pybind11::arg("input"));
  m.def("philox_block", &philox_block, "One Philox4x32-10 block: four words of (counter, key).",
        pybind11::arg("counter"), pybind11::arg("key"));
}
