// The ``treernn`` GEMM backend of treernn/kernels/gemm.py: a weight packed once into panels
// (``pack``) and products C = added + A @ W^T of small batches against it (``linear``), with the
// micro-kernels of packed_gemm.h (bf16: AMX tiles or AVX-512 BF16; float32 and float64: AVX-512,
// AVX2 + FMA or portable C++; chosen at run time). Panels are split over torch's threads
// (at::parallel_for, compiled with OpenMP).

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/utils/pybind.h>

#include <optional>
#include <vector>

#include "packed_gemm.h"

namespace {

// W (N x K, any strides) packed for the products: float32 / float64 (P, K, 16), or with ``bf16``
// (float32 W only) bf16 pairs (P, ceil(K / 2), 16, 2).
at::Tensor pack(const at::Tensor& weight, bool bf16) {
  TORCH_CHECK(weight.dim() == 2 && weight.device().is_cpu(), "pack: a 2-D CPU weight");
  const int64_t n_outputs = weight.size(0), depth = weight.size(1);
  const int64_t panels = panels_of(n_outputs);
  const int64_t row_stride = weight.stride(0), col_stride = weight.stride(1);
  if (bf16) {
    TORCH_CHECK(weight.scalar_type() == at::kFloat, "pack: bf16 panels from a float32 weight");
    auto packed = at::empty({panels, (depth + 1) / 2, kPanel, 2},
                            weight.options().dtype(at::kBFloat16));
    const float* w = weight.data_ptr<float>();
    uint16_t* out = reinterpret_cast<uint16_t*>(packed.data_ptr<at::BFloat16>());
    at::parallel_for(0, panels, 1, [&](int64_t p0, int64_t p1) {
      pack_panels_bf16(w, row_stride, col_stride, n_outputs, depth, out, p0, p1);
    });
    return packed;
  }
  auto packed = at::empty({panels, depth, kPanel}, weight.options());
  AT_DISPATCH_FLOATING_TYPES(weight.scalar_type(), "treernn_pack", [&] {
    const scalar_t* w = weight.data_ptr<scalar_t>();
    scalar_t* out = packed.data_ptr<scalar_t>();
    at::parallel_for(0, panels, 1, [&](int64_t p0, int64_t p1) {
      pack_panels(w, row_stride, col_stride, n_outputs, depth, out, p0, p1);
    });
  });
  return packed;
}

// added + x @ W^T for x (B x K), W packed by ``pack`` (N outputs); into ``out`` if given.
at::Tensor linear(const at::Tensor& x, const at::Tensor& packed, int64_t n_outputs,
                  const std::optional<at::Tensor>& added, const std::optional<at::Tensor>& out,
                  int64_t isa) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.device().is_cpu(), "linear: x (B, K)");
  const int64_t rows = x.size(0), depth = x.size(1);
  const bool bf16 = packed.scalar_type() == at::kBFloat16;
  TORCH_CHECK(packed.size(0) == panels_of(n_outputs), "linear: packed for other outputs");
  TORCH_CHECK(packed.size(1) == (bf16 ? (depth + 1) / 2 : depth), "linear: packed for another K");
  TORCH_CHECK(bf16 ? x.scalar_type() == at::kFloat : x.scalar_type() == packed.scalar_type(),
              "linear: x of the packed weight's dtype (float32 for bf16 panels)");
  at::Tensor result = out.has_value() ? *out : at::empty({rows, n_outputs}, x.options());
  TORCH_CHECK(result.is_contiguous() && result.size(0) == rows && result.size(1) == n_outputs,
              "linear: out (B, N) contiguous");
  if (added.has_value())
    TORCH_CHECK(added->is_contiguous() && added->sizes() == result.sizes() &&
                    added->scalar_type() == result.scalar_type(),
                "linear: added (B, N) contiguous, of the result's dtype");
  const int64_t pairs = (panels_of(n_outputs) + 1) / 2;
  if (bf16) {
    TORCH_CHECK(cpu_has_bf16_pairs(), "linear: bf16 panels need AVX512-BF16");
    std::vector<uint32_t> x_pairs(rows * ((depth + 1) / 2));
    to_bf16_pairs(x.data_ptr<float>(), depth, depth, 0, rows, x_pairs.data());
    const Product<uint32_t, uint32_t, float> m{
        x_pairs.data(), (depth + 1) / 2, rows, (depth + 1) / 2,
        reinterpret_cast<const uint32_t*>(packed.data_ptr<at::BFloat16>()), n_outputs,
        result.data_ptr<float>(), n_outputs,
        added.has_value() ? added->data_ptr<float>() : nullptr, n_outputs};
    at::parallel_for(0, pairs, 1, [&](int64_t q0, int64_t q1) {
      product_panels_bf16(m, 2 * q0, std::min(2 * q1, panels_of(n_outputs)));
    });
    return result;
  }
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "treernn_linear", [&] {
    const Product<scalar_t, scalar_t, scalar_t> m{
        x.data_ptr<scalar_t>(), depth, rows, depth, packed.data_ptr<scalar_t>(), n_outputs,
        result.data_ptr<scalar_t>(), n_outputs,
        added.has_value() ? added->data_ptr<scalar_t>() : nullptr, n_outputs};
    const int64_t chosen = isa_for(isa);
    at::parallel_for(0, pairs, 1, [&](int64_t q0, int64_t q1) {
      product_panels(m, 2 * q0, std::min(2 * q1, panels_of(n_outputs)), chosen);
    });
  });
  return result;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("amx", &cpu_has_amx, "whether the bf16 products can run on AMX's tiles here");
  m.def("set_amx", &set_amx, "bf16 products on AMX (True, the default, where the CPU has it) or "
        "AVX512-BF16; returns the previous setting", pybind11::arg("allowed"));
  m.doc() = "Packed-panel products of small batches (treernn.kernels.gemm, backend treernn).";
  m.def("pack", &pack, pybind11::arg("weight"), pybind11::arg("bf16"));
  m.def("linear", &linear, pybind11::arg("x"), pybind11::arg("packed"),
        pybind11::arg("n_outputs"), pybind11::arg("added") = pybind11::none(),
        pybind11::arg("out") = pybind11::none(),
        pybind11::arg("isa") = 0);
  m.def("isa", &detected_isa, "1 portable C++, 2 AVX2 + FMA, 3 AVX-512");
  m.def("bf16_pairs", &cpu_has_bf16_pairs, "whether the CPU has AVX512-BF16");
}
