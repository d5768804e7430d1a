// The elementwise work of Ordered Memory's slot chain, fused (treernn/kernels/ordered_memory.py
// builds and calls it; the equations are in treernn/encoders/ordered_memory.py). The chain's matrix
// products stay in Python (on the GEMM backend of treernn/kernels/gemm.py); between them, where the
// torch-ops path runs about ten small ops per slot forward and fifteen backward, these kernels make
// one pass over each row:
//
// relu_scale:       the cell's ReLU layer after its dropout mask, h = max(a * m, 0), in place.
// compose_forward:  after [v; h; c; u] = W2 h + b2, per row: the three sigmoid gates (written back),
//                   the mix sigmoid(v) left + sigmoid(h) right + sigmoid(c) u, its LayerNorm (mean
//                   and 1 / std kept), the candidate x (1 - cp) + LN cp (eq. 7), and the next slot's
//                   left input (times its dropout mask).
// compose_backward: the reverse of compose_forward for one slot, starting from the gradient reaching
//                   the slot's candidate (its output's, plus what the slot above sends back through
//                   its left input and vertical gate), to the gradient of [v; h; c; u].
// relu_backward:    the gradient through the ReLU layer and its dropout mask.
//
// float32 and float64 CPU tensors whose rows are contiguous (any row stride), rows split over
// threads with at::parallel_for; float32 uses fast_math.h's sigmoid, float64 libm's. The row loops
// are compiled for AVX2 + FMA and for the baseline ISA, chosen at run time (see fast_math.h).

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>

#include "fast_math.h"

namespace {

// One 2-D operand: a pointer to its first row and the distance between rows (columns contiguous).
template <typename T>
struct Rows {
  T* data = nullptr;
  int64_t stride = 0;
  TREERNN_INLINE T* row(int64_t r) const { return data + r * stride; }
};

// Sum of n values with eight partial sums, so that the compiler vectorises it.
template <typename scalar_t>
TREERNN_INLINE scalar_t row_sum(const scalar_t* __restrict a, int64_t n) {
  scalar_t partial[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int l = 0; l < 8; ++l) partial[l] += a[j + l];
  scalar_t total = 0;
  for (; j < n; ++j) total += a[j];
  for (int l = 0; l < 8; ++l) total += partial[l];
  return total;
}

template <typename scalar_t>
struct ReluScale {
  Rows<scalar_t> hidden;       // (rows, F): in, W1 [l; r] + b1; out, the ReLU layer
  Rows<const scalar_t> scale;  // (rows, F) or null: the dropout mask (>= 0)
  int64_t width;
  TREERNN_INLINE void rows(int64_t begin, int64_t end) const {
    for (int64_t r = begin; r < end; ++r) {
      scalar_t* __restrict h = hidden.row(r);
      if (scale.data == nullptr) {
        for (int64_t j = 0; j < width; ++j) h[j] = h[j] > scalar_t(0) ? h[j] : scalar_t(0);
      } else {
        const scalar_t* __restrict m = scale.row(r);
        for (int64_t j = 0; j < width; ++j) {
          const scalar_t v = h[j] * m[j];
          h[j] = v > scalar_t(0) ? v : scalar_t(0);
        }
      }
    }
  }
};

template <typename scalar_t>
struct ReluBackward {
  Rows<const scalar_t> grad;    // (rows, F): d loss / d ReLU layer
  Rows<const scalar_t> hidden;  // (rows, F): the ReLU layer
  Rows<const scalar_t> scale;   // (rows, F) or null
  Rows<scalar_t> out;           // (rows, F): d loss / d (W1 [l; r] + b1)
  int64_t width;
  TREERNN_INLINE void rows(int64_t begin, int64_t end) const {
    for (int64_t r = begin; r < end; ++r) {
      const scalar_t* __restrict g = grad.row(r);
      const scalar_t* __restrict h = hidden.row(r);
      scalar_t* __restrict o = out.row(r);
      if (scale.data == nullptr) {
        for (int64_t j = 0; j < width; ++j) o[j] = h[j] > scalar_t(0) ? g[j] : scalar_t(0);
      } else {
        const scalar_t* __restrict m = scale.row(r);
        for (int64_t j = 0; j < width; ++j) o[j] = h[j] > scalar_t(0) ? g[j] * m[j] : scalar_t(0);
      }
    }
  }
};

template <typename scalar_t>
struct ComposeForward {
  Rows<scalar_t> second;             // (rows, 4H): [v; h; c; u] in; sigmoid(v, h, c) written back
  Rows<const scalar_t> below;        // (rows, H): the left input M_hat^{k-1} (before dropout)
  Rows<const scalar_t> memory;       // (rows, H): the right input M^k
  Rows<const scalar_t> x;            // (rows, H): x_t
  Rows<const scalar_t> write;        // (rows, 1): cp^k
  const scalar_t* ln_weight;         // (H,)
  const scalar_t* ln_bias;           // (H,)
  scalar_t eps;
  Rows<scalar_t> mixed;              // (rows, H): the LayerNorm's input
  Rows<scalar_t> normed;             // (rows, H): its output, o^k
  Rows<scalar_t> mean, rstd;         // (rows, 1)
  Rows<scalar_t> out;                // (rows, H): M_hat^k
  Rows<scalar_t> left_next;          // (rows, H) or null: the next slot's left input
  Rows<const scalar_t> left_mask;    // (rows, H) or null: its dropout mask
  int64_t size;
  TREERNN_INLINE void rows(int64_t begin, int64_t end) const {
    const int64_t n = size;
    for (int64_t r = begin; r < end; ++r) {
      scalar_t* __restrict gates = second.row(r);
      for (int64_t j = 0; j < 3 * n; ++j) gates[j] = sigmoid_of(gates[j]);
      const scalar_t* __restrict vertical = gates;
      const scalar_t* __restrict horizontal = gates + n;
      const scalar_t* __restrict candidate_gate = gates + 2 * n;
      const scalar_t* __restrict candidate = gates + 3 * n;
      const scalar_t* __restrict left = below.row(r);
      const scalar_t* __restrict right = memory.row(r);
      scalar_t* __restrict m = mixed.row(r);
      for (int64_t j = 0; j < n; ++j)
        m[j] = vertical[j] * left[j] + horizontal[j] * right[j] + candidate_gate[j] * candidate[j];
      const scalar_t mu = row_sum(m, n) / scalar_t(n);
      scalar_t* __restrict o = normed.row(r);
      for (int64_t j = 0; j < n; ++j) o[j] = (m[j] - mu) * (m[j] - mu);  // scratch
      const scalar_t inv = scalar_t(1) / std::sqrt(row_sum(o, n) / scalar_t(n) + eps);
      *mean.row(r) = mu;
      *rstd.row(r) = inv;
      const scalar_t cp = *write.row(r);
      const scalar_t* __restrict xt = x.row(r);
      scalar_t* __restrict result = out.row(r);
      for (int64_t j = 0; j < n; ++j) {
        o[j] = (m[j] - mu) * inv * ln_weight[j] + ln_bias[j];
        result[j] = xt[j] + cp * (o[j] - xt[j]);
      }
      if (left_next.data != nullptr) {
        scalar_t* __restrict next = left_next.row(r);
        if (left_mask.data == nullptr) {
          for (int64_t j = 0; j < n; ++j) next[j] = result[j];
        } else {
          const scalar_t* __restrict keep = left_mask.row(r);
          for (int64_t j = 0; j < n; ++j) next[j] = result[j] * keep[j];
        }
      }
    }
  }
};

template <typename scalar_t>
struct ComposeBackward {
  Rows<const scalar_t> grad_out;       // (rows, H): d loss / d M_hat^k from outside the chain
  // from the slot above (k + 1), or null for the last slot: its LayerNorm-input gradient, its
  // vertical gate and the gradient of its left input (before that input's dropout mask)
  Rows<const scalar_t> above_d_mixed, above_vertical, above_d_left, left_mask;
  Rows<const scalar_t> write;          // (rows, 1): cp^k
  Rows<const scalar_t> mixed, mean, rstd;
  const scalar_t* ln_weight;
  Rows<const scalar_t> second;         // (rows, 4H): sigmoid(v, h, c) and u
  Rows<const scalar_t> below, memory;  // (rows, H): the left and right inputs
  Rows<scalar_t> grad_below;           // (rows, H): d loss / d M_hat^k (all paths)
  Rows<scalar_t> grad_normed;          // (rows, H): d loss / d o^k
  Rows<scalar_t> d_mixed;              // (rows, H): d loss / d the LayerNorm's input
  Rows<scalar_t> grad_second;          // (rows, 4H): d loss / d [v; h; c; u]
  int64_t size;
  TREERNN_INLINE void rows(int64_t begin, int64_t end) const {
    const int64_t n = size;
    for (int64_t r = begin; r < end; ++r) {
      scalar_t* __restrict gb = grad_below.row(r);
      const scalar_t* __restrict go = grad_out.row(r);
      if (above_d_mixed.data == nullptr) {
        for (int64_t j = 0; j < n; ++j) gb[j] = go[j];
      } else {
        const scalar_t* __restrict dm = above_d_mixed.row(r);
        const scalar_t* __restrict vg = above_vertical.row(r);
        const scalar_t* __restrict dl = above_d_left.row(r);
        if (left_mask.data == nullptr) {
          for (int64_t j = 0; j < n; ++j) gb[j] = go[j] + (dm[j] * vg[j] + dl[j]);
        } else {
          const scalar_t* __restrict keep = left_mask.row(r);
          for (int64_t j = 0; j < n; ++j) gb[j] = go[j] + (dm[j] * vg[j] + dl[j] * keep[j]);
        }
      }
      const scalar_t cp = *write.row(r);
      const scalar_t mu = *mean.row(r), inv = *rstd.row(r);
      scalar_t* __restrict gn = grad_normed.row(r);
      scalar_t* __restrict d = d_mixed.row(r);
      const scalar_t* __restrict m = mixed.row(r);
      // LayerNorm backward: d = inv (g - mean(g) - xhat mean(g xhat)), g = gn * weight
      for (int64_t j = 0; j < n; ++j) {
        gn[j] = gb[j] * cp;
        d[j] = gn[j] * ln_weight[j];  // g, for now
      }
      const scalar_t mean_g = row_sum(d, n) / scalar_t(n);
      scalar_t* __restrict gs = grad_second.row(r);
      for (int64_t j = 0; j < n; ++j) gs[j] = d[j] * ((m[j] - mu) * inv);  // scratch: g xhat
      const scalar_t mean_gx = row_sum(gs, n) / scalar_t(n);
      for (int64_t j = 0; j < n; ++j)
        d[j] = inv * (d[j] - mean_g - ((m[j] - mu) * inv) * mean_gx);
      const scalar_t* __restrict gates = second.row(r);
      const scalar_t* __restrict left = below.row(r);
      const scalar_t* __restrict right = memory.row(r);
      for (int64_t j = 0; j < n; ++j) {
        const scalar_t v = gates[j], h = gates[n + j], c = gates[2 * n + j], u = gates[3 * n + j];
        gs[j] = d[j] * left[j] * (v * (scalar_t(1) - v));
        gs[n + j] = d[j] * right[j] * (h * (scalar_t(1) - h));
        gs[2 * n + j] = d[j] * u * (c * (scalar_t(1) - c));
        gs[3 * n + j] = d[j] * c;
      }
    }
  }
};

template <typename Kernel>
__attribute__((target("avx2,fma"))) void rows_avx2(const Kernel& kernel, int64_t begin,
                                                   int64_t end) {
  kernel.rows(begin, end);
}

template <typename Kernel>
void rows_baseline(const Kernel& kernel, int64_t begin, int64_t end) {
  kernel.rows(begin, end);
}

// Rows per thread: about 64k values of work, so that small batches stay on the calling thread.
template <typename Kernel>
void run(const Kernel& kernel, int64_t rows, int64_t values_per_row) {
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, values_per_row));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
#ifdef TREERNN_HAS_AVX2_COPY
    if (cpu_has_avx2()) return rows_avx2(kernel, begin, end);
#endif
    rows_baseline(kernel, begin, end);
  });
}

// A checked view of a (rows, columns) operand, or of a (rows,) / (rows, 1) one with columns = 1.
template <typename T>
Rows<T> rows_of(const at::Tensor& tensor, const char* name, at::ScalarType dtype, int64_t rows,
                int64_t columns) {
  TORCH_CHECK(tensor.device().is_cpu() && tensor.scalar_type() == dtype, name,
              " must be a CPU tensor of dtype ", dtype, ", got ", tensor.scalar_type());
  const bool vector = columns == 1 && tensor.dim() == 1;
  TORCH_CHECK(vector || (tensor.dim() == 2 && tensor.size(1) == columns), name, " must be (",
              rows, ", ", columns, "), got ", tensor.sizes());
  TORCH_CHECK(tensor.size(0) == rows, name, " must have ", rows, " rows, got ", tensor.size(0));
  TORCH_CHECK(vector || columns == 1 || tensor.stride(1) == 1, name,
              " must have contiguous rows");
  using Plain = std::remove_const_t<T>;
  return {tensor.data_ptr<Plain>(), tensor.stride(0)};
}

template <typename T>
Rows<T> optional_rows(const std::optional<at::Tensor>& tensor, const char* name,
                      at::ScalarType dtype, int64_t rows, int64_t columns) {
  return tensor.has_value() ? rows_of<T>(*tensor, name, dtype, rows, columns) : Rows<T>{};
}

void check_dtype(const at::Tensor& tensor) {
  TORCH_CHECK(tensor.scalar_type() == at::kFloat || tensor.scalar_type() == at::kDouble,
              "the fused slot chain runs float32 and float64 only, got ", tensor.scalar_type());
}

void relu_scale(const at::Tensor& hidden, const std::optional<at::Tensor>& scale) {
  check_dtype(hidden);
  const int64_t rows = hidden.size(0), width = hidden.size(1);
  AT_DISPATCH_FLOATING_TYPES(hidden.scalar_type(), "om_relu_scale", [&] {
    const auto dtype = hidden.scalar_type();
    const ReluScale<scalar_t> kernel{rows_of<scalar_t>(hidden, "hidden", dtype, rows, width),
                                     optional_rows<const scalar_t>(scale, "scale", dtype, rows,
                                                                   width),
                                     width};
    run(kernel, rows, width);
  });
}

void relu_backward(const at::Tensor& grad, const at::Tensor& hidden,
                   const std::optional<at::Tensor>& scale, const at::Tensor& out) {
  check_dtype(hidden);
  const int64_t rows = hidden.size(0), width = hidden.size(1);
  AT_DISPATCH_FLOATING_TYPES(hidden.scalar_type(), "om_relu_backward", [&] {
    const auto dtype = hidden.scalar_type();
    const ReluBackward<scalar_t> kernel{
        rows_of<const scalar_t>(grad, "grad", dtype, rows, width),
        rows_of<const scalar_t>(hidden, "hidden", dtype, rows, width),
        optional_rows<const scalar_t>(scale, "scale", dtype, rows, width),
        rows_of<scalar_t>(out, "out", dtype, rows, width), width};
    run(kernel, rows, width);
  });
}

void compose_forward(const at::Tensor& second, const at::Tensor& below, const at::Tensor& memory,
                     const at::Tensor& x, const at::Tensor& write, const at::Tensor& ln_weight,
                     const at::Tensor& ln_bias, double eps, const at::Tensor& mixed,
                     const at::Tensor& normed, const at::Tensor& mean, const at::Tensor& rstd,
                     const at::Tensor& out, const std::optional<at::Tensor>& left_next,
                     const std::optional<at::Tensor>& left_mask) {
  check_dtype(second);
  const int64_t rows = x.size(0), size = x.size(1);
  TORCH_CHECK(ln_weight.is_contiguous() && ln_bias.is_contiguous() && ln_weight.numel() == size &&
                  ln_bias.numel() == size,
              "the LayerNorm's weight and bias must be contiguous with ", size, " values");
  AT_DISPATCH_FLOATING_TYPES(second.scalar_type(), "om_compose_forward", [&] {
    const auto dtype = second.scalar_type();
    TORCH_CHECK(ln_weight.scalar_type() == dtype && ln_bias.scalar_type() == dtype,
                "the LayerNorm's weight and bias must be ", dtype);
    const ComposeForward<scalar_t> kernel{
        rows_of<scalar_t>(second, "second", dtype, rows, 4 * size),
        rows_of<const scalar_t>(below, "below", dtype, rows, size),
        rows_of<const scalar_t>(memory, "memory", dtype, rows, size),
        rows_of<const scalar_t>(x, "x", dtype, rows, size),
        rows_of<const scalar_t>(write, "write", dtype, rows, 1),
        ln_weight.data_ptr<scalar_t>(),
        ln_bias.data_ptr<scalar_t>(),
        static_cast<scalar_t>(eps),
        rows_of<scalar_t>(mixed, "mixed", dtype, rows, size),
        rows_of<scalar_t>(normed, "normed", dtype, rows, size),
        rows_of<scalar_t>(mean, "mean", dtype, rows, 1),
        rows_of<scalar_t>(rstd, "rstd", dtype, rows, 1),
        rows_of<scalar_t>(out, "out", dtype, rows, size),
        optional_rows<scalar_t>(left_next, "left_next", dtype, rows, size),
        optional_rows<const scalar_t>(left_mask, "left_mask", dtype, rows, size),
        size};
    run(kernel, rows, 8 * size);
  });
}

void compose_backward(const at::Tensor& grad_out, const std::optional<at::Tensor>& above_d_mixed,
                      const std::optional<at::Tensor>& above_vertical,
                      const std::optional<at::Tensor>& above_d_left,
                      const std::optional<at::Tensor>& left_mask, const at::Tensor& write,
                      const at::Tensor& mixed, const at::Tensor& mean, const at::Tensor& rstd,
                      const at::Tensor& ln_weight, const at::Tensor& second,
                      const at::Tensor& below, const at::Tensor& memory,
                      const at::Tensor& grad_below, const at::Tensor& grad_normed,
                      const at::Tensor& d_mixed, const at::Tensor& grad_second) {
  check_dtype(second);
  const int64_t rows = grad_out.size(0), size = grad_out.size(1);
  TORCH_CHECK(above_d_mixed.has_value() == above_vertical.has_value() &&
                  above_d_mixed.has_value() == above_d_left.has_value(),
              "give all three of above_d_mixed, above_vertical and above_d_left, or none");
  TORCH_CHECK(ln_weight.is_contiguous() && ln_weight.numel() == size,
              "the LayerNorm's weight must be contiguous with ", size, " values");
  AT_DISPATCH_FLOATING_TYPES(second.scalar_type(), "om_compose_backward", [&] {
    const auto dtype = second.scalar_type();
    TORCH_CHECK(ln_weight.scalar_type() == dtype, "the LayerNorm's weight must be ", dtype);
    const ComposeBackward<scalar_t> kernel{
        rows_of<const scalar_t>(grad_out, "grad_out", dtype, rows, size),
        optional_rows<const scalar_t>(above_d_mixed, "above_d_mixed", dtype, rows, size),
        optional_rows<const scalar_t>(above_vertical, "above_vertical", dtype, rows, size),
        optional_rows<const scalar_t>(above_d_left, "above_d_left", dtype, rows, size),
        optional_rows<const scalar_t>(left_mask, "left_mask", dtype, rows, size),
        rows_of<const scalar_t>(write, "write", dtype, rows, 1),
        rows_of<const scalar_t>(mixed, "mixed", dtype, rows, size),
        rows_of<const scalar_t>(mean, "mean", dtype, rows, 1),
        rows_of<const scalar_t>(rstd, "rstd", dtype, rows, 1),
        ln_weight.data_ptr<scalar_t>(),
        rows_of<const scalar_t>(second, "second", dtype, rows, 4 * size),
        rows_of<const scalar_t>(below, "below", dtype, rows, size),
        rows_of<const scalar_t>(memory, "memory", dtype, rows, size),
        rows_of<scalar_t>(grad_below, "grad_below", dtype, rows, size),
        rows_of<scalar_t>(grad_normed, "grad_normed", dtype, rows, size),
        rows_of<scalar_t>(d_mixed, "d_mixed", dtype, rows, size),
        rows_of<scalar_t>(grad_second, "grad_second", dtype, rows, 4 * size),
        size};
    run(kernel, rows, 10 * size);
  });
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "The fused elementwise work of Ordered Memory's slot chain "
            "(treernn.kernels.ordered_memory).";
  m.def("relu_scale", &relu_scale, "h = max(h * scale, 0) in place.", pybind11::arg("hidden"),
        pybind11::arg("scale"));
  m.def("relu_backward", &relu_backward, "out = (hidden > 0) * grad * scale.",
        pybind11::arg("grad"), pybind11::arg("hidden"), pybind11::arg("scale"),
        pybind11::arg("out"));
  m.def("compose_forward", &compose_forward, "One slot's gates, mix, LayerNorm and candidate.",
        pybind11::arg("second"), pybind11::arg("below"), pybind11::arg("memory"),
        pybind11::arg("x"), pybind11::arg("write"), pybind11::arg("ln_weight"),
        pybind11::arg("ln_bias"), pybind11::arg("eps"), pybind11::arg("mixed"),
        pybind11::arg("normed"), pybind11::arg("mean"), pybind11::arg("rstd"),
        pybind11::arg("out"), pybind11::arg("left_next"), pybind11::arg("left_mask"));
  m.def("compose_backward", &compose_backward, "The reverse of compose_forward for one slot.",
        pybind11::arg("grad_out"), pybind11::arg("above_d_mixed"),
        pybind11::arg("above_vertical"), pybind11::arg("above_d_left"),
        pybind11::arg("left_mask"), pybind11::arg("write"), pybind11::arg("mixed"),
        pybind11::arg("mean"), pybind11::arg("rstd"), pybind11::arg("ln_weight"),
        pybind11::arg("second"), pybind11::arg("below"), pybind11::arg("memory"),
        pybind11::arg("grad_below"), pybind11::arg("grad_normed"), pybind11::arg("d_mixed"),
        pybind11::arg("grad_second"));
}
