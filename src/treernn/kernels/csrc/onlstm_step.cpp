// The elementwise work of one ON-LSTM step, fused: one call per step and direction instead of
// about twenty small torch ops (treernn/kernels/onlstm.py, which builds and calls it; the
// equations are in treernn/encoders/onlstm.py).
//
// forward_step: after the per-step product has written the pre-activations into ``act`` (B, G)
// (or, given ``product`` and ``added``, writing act = added + product first), per batch row: both
// master gates' softmax and cumsum, the gate nonlinearities (written back into ``act``, the master
// logits left as they are), the master-gate overlap, the new cell, its tanh, the new hidden state
// and the step mask, into the same buffers the torch-ops path writes.
//
// backward_step: from the gradients reaching the step's h and c to the pre-activation gradients
// (one row of grad_gates) and the gradient reaching the previous cell, recomputing what it needs
// of the forward step from the saved buffers (cheaper than reading precomputed products back).
//
// forward_sequence / backward_sequence: every step of a call in one parallel region, for the
// ``treernn`` GEMM backend: per step the recurrent product on the packed panels of packed_gemm.h
// (each thread its share of the panels; the input projection added in the product's epilogue),
// a barrier, the rows' elementwise work (each thread its share of the rows), a barrier. No call
// back into Python or torch's dispatcher per step; bf16 panels run the products in bf16 (the
// states converted to bf16 pairs by the rows' owners), everything else stays float32.
//
// forward_sequence_projected: the same loop with the input projection inside it:
// per step one product over [x_t | h_t] with [W_ih | W_hh] packed as one weight (pack_projected),
// so that the (T, B, G) projection is never written and read back; it also writes the outputs
// batch-first and the distances, while each row is in its thread's cache.
//
// float32 and float64 CPU contiguous tensors, rows split over threads with at::parallel_for.
// float64 uses libm's exp and tanh (the float64 tests compare with the reference to 1e-10);
// float32 uses the polynomial approximations of fast_math.h (within a few ulp of libm), so that the
// compiler vectorises the loops. The row loops are compiled three times on x86-64, for AVX-512, for
// AVX2 + FMA and for the baseline ISA, and the best copy is chosen at run time (the build itself
// never uses -march=native, so a build cache can be shared between different CPUs).

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/add.h>
#include <ATen/ops/empty.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "fast_math.h"
#include "packed_gemm.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace {

// ---- one step ---------------------------------------------------------------------------------

// Row pointers of one step's tensors (row-major, one batch row after another).
template <typename scalar_t>
struct ForwardArgs {
  scalar_t* act;             // (B, G): pre-activations in, gates out (master logits kept)
  const scalar_t* product;   // (B, G) or null: h_prev @ W_hh^T, when act is still to be filled
  const scalar_t* added;     // (B, G) or null: the input projection added to it
  scalar_t* cumax;           // (B, 2, n): cumsum of each master gate's softmax
  const scalar_t* c_prev;    // (B, H)
  const scalar_t* h_prev;    // (B, H)
  scalar_t* c_new;           // (B, H)
  scalar_t* h_new;           // (B, H)
  scalar_t* output;          // (B, H) or null: h_new times the step mask (masked steps only)
  scalar_t* tanh_cell;       // (B, H) or null: tanh(c) of the new cell, kept for backward
  const bool* real;          // (B,) or null: the step mask
  int64_t n_chunk, chunk_size;
};

template <typename scalar_t>
struct BackwardArgs {
  const scalar_t* act;        // (B, G): the forward step's gates (master logits kept)
  const scalar_t* cumax;      // (B, 2, n)
  const scalar_t* tanh_cell;  // (B, H)
  const scalar_t* c_prev;     // (B, H)
  const scalar_t* grad_output;    // (B, H): gradient of this step's output
  const scalar_t* grad_distance;  // (B, 2) or null: of the summed cumsums (input, forget)
  scalar_t* grad_h;           // (B, H): in, the gradient reaching h_new from later steps;
                              // out (masked steps), the part that skips this step
  scalar_t* grad_c;           // (B, H): in, the gradient reaching c_new; out, reaching c_prev
  scalar_t* grad_act;         // (B, G): the pre-activation gradients
  const bool* real;           // (B,) or null
  int64_t n_chunk, chunk_size;
};

// Softmax then cumsum of n logits (max subtracted first; the sum accumulated in double as
// torch's cumsum does for float32). Writes the softmax to ``softmax`` and the cumsum to ``cumax``.
// The exponentials and the divisions run in loops of their own, which vectorise; the two sums
// stay sequential, in order (the same bits as one loop doing all: a float sum is not reordered).
template <typename scalar_t>
TREERNN_INLINE void softmax_cumsum(const scalar_t* logits, int64_t n,
                                   scalar_t* __restrict softmax, scalar_t* cumax) {
  scalar_t top = logits[0];
  for (int64_t k = 1; k < n; ++k) top = logits[k] > top ? logits[k] : top;
  for (int64_t k = 0; k < n; ++k) softmax[k] = exp_of(logits[k] - top);
  scalar_t total = 0;
  for (int64_t k = 0; k < n; ++k) total += softmax[k];
  for (int64_t k = 0; k < n; ++k) softmax[k] = softmax[k] / total;
  if (cumax == nullptr) return;
  double running = 0;
  for (int64_t k = 0; k < n; ++k) {
    running += softmax[k];
    cumax[k] = static_cast<scalar_t>(running);
  }
}

// The master gates of one row, one value per neuron (each chunk's value repeated chunk_size
// times) so that the neuron loops run flat over H and vectorise.
template <typename scalar_t>
TREERNN_INLINE void expand_masters(const scalar_t* cumax, int64_t n_chunk, int64_t chunk_size,
                                   scalar_t* master_input, scalar_t* master_forget,
                                   scalar_t* overlap) {
  for (int64_t k = 0; k < n_chunk; ++k) {
    const scalar_t input = scalar_t(1) - cumax[k];
    const scalar_t forget = cumax[n_chunk + k];
    const scalar_t both = forget * input;
    for (int64_t j = k * chunk_size; j < (k + 1) * chunk_size; ++j) {
      master_input[j] = input;
      master_forget[j] = forget;
      overlap[j] = both;
    }
  }
}

// out = added + product, as torch.add(added, product) rounds it
template <typename scalar_t>
TREERNN_INLINE void add_rows(int64_t size, const scalar_t* __restrict added,
                             const scalar_t* __restrict product, scalar_t* __restrict out) {
  for (int64_t j = 0; j < size; ++j) out[j] = added[j] + product[j];
}

// The neuron loop of one row of forward_step (restrict parameters: the compiler may vectorise).
template <typename scalar_t>
TREERNN_INLINE void forward_neurons(int64_t hidden, scalar_t* __restrict gates,
                                    const scalar_t* __restrict mi, const scalar_t* __restrict mf,
                                    const scalar_t* __restrict ov,
                                    const scalar_t* __restrict c_prev, scalar_t* __restrict c_new,
                                    scalar_t* __restrict h_new, scalar_t* __restrict tanh_cell) {
  scalar_t* __restrict out_gate = gates;
  scalar_t* __restrict candidate = gates + hidden;
  scalar_t* __restrict input_gate = gates + 2 * hidden;
  scalar_t* __restrict forget_gate = gates + 3 * hidden;
  for (int64_t j = 0; j < hidden; ++j) {
    const scalar_t o = sigmoid_of(out_gate[j]);
    const scalar_t g = tanh_of(candidate[j]);
    const scalar_t i = sigmoid_of(input_gate[j]);
    const scalar_t f = sigmoid_of(forget_gate[j]);
    out_gate[j] = o;
    candidate[j] = g;
    input_gate[j] = i;
    forget_gate[j] = f;
    const scalar_t forget_hat = (mf[j] - ov[j]) + f * ov[j];
    const scalar_t input_hat = (mi[j] - ov[j]) + i * ov[j];
    const scalar_t c = forget_hat * c_prev[j] + input_hat * g;
    const scalar_t tc = tanh_of(c);
    c_new[j] = c;
    h_new[j] = o * tc;
    tanh_cell[j] = tc;
  }
}

// The neuron loop of one row of backward_step. ``keep`` is 0 at a padded step of a masked
// sequence, where the carried state's gradients pass straight through (``skip`` = 1 - keep).
template <bool kMasked, typename scalar_t>
TREERNN_INLINE void backward_neurons(
    int64_t hidden, scalar_t keep, const scalar_t* __restrict gates,
    const scalar_t* __restrict mi, const scalar_t* __restrict mf, const scalar_t* __restrict ov,
    const scalar_t* __restrict tanh_cell, const scalar_t* __restrict c_prev,
    const scalar_t* __restrict grad_output, scalar_t* __restrict grad_h,
    scalar_t* __restrict grad_c, scalar_t* __restrict grad_gates, scalar_t* __restrict to_in,
    scalar_t* __restrict to_mf, scalar_t* __restrict to_ov) {
  const scalar_t skip = scalar_t(1) - keep;
  const scalar_t* __restrict out_gate = gates;
  const scalar_t* __restrict candidate = gates + hidden;
  const scalar_t* __restrict input_gate = gates + 2 * hidden;
  const scalar_t* __restrict forget_gate = gates + 3 * hidden;
  scalar_t* __restrict grad_out_gate = grad_gates;
  scalar_t* __restrict grad_candidate = grad_gates + hidden;
  scalar_t* __restrict grad_input_gate = grad_gates + 2 * hidden;
  scalar_t* __restrict grad_forget_gate = grad_gates + 3 * hidden;
  for (int64_t j = 0; j < hidden; ++j) {
    // the gradients reaching this step's new h and c
    scalar_t grad_h_new = grad_h[j] + grad_output[j];
    scalar_t grad_c_new = grad_c[j];
    if (kMasked) {
      grad_h_new = grad_h_new * keep;
      grad_c_new = grad_c_new * keep;
    }
    const scalar_t o = out_gate[j], g = candidate[j], i = input_gate[j], f = forget_gate[j];
    const scalar_t tc = tanh_cell[j];
    const scalar_t cp = c_prev[j];
    const scalar_t grad_cell = grad_c_new + grad_h_new * (o * (scalar_t(1) - tc * tc));
    grad_out_gate[j] = grad_h_new * (tc * o * (scalar_t(1) - o));
    const scalar_t input_hat = (mi[j] - ov[j]) + i * ov[j];
    const scalar_t forget_hat = (mf[j] - ov[j]) + f * ov[j];
    grad_candidate[j] = grad_cell * (input_hat * (scalar_t(1) - g * g));
    grad_input_gate[j] = grad_cell * (g * ov[j] * i * (scalar_t(1) - i));
    grad_forget_gate[j] = grad_cell * (cp * ov[j] * f * (scalar_t(1) - f));
    // d c_new -> d cumsum_in (master_input = 1 - cumsum_in), d master_forget, d overlap
    to_in[j] = grad_cell * -g;
    to_mf[j] = grad_cell * cp;
    to_ov[j] = grad_cell * (cp * (f - scalar_t(1)) + g * (i - scalar_t(1)));
    scalar_t grad_c_prev = grad_cell * forget_hat;
    if (kMasked) {
      grad_c_prev = grad_c_prev + grad_c[j] * skip;
      grad_h[j] = grad_h[j] * skip;
    }
    grad_c[j] = grad_c_prev;
  }
}

template <typename scalar_t>
TREERNN_INLINE void forward_rows(const ForwardArgs<scalar_t>& a, int64_t begin, int64_t end) {
  const int64_t n = a.n_chunk;
  const int64_t hidden = n * a.chunk_size;
  const int64_t gates = 2 * n + 4 * hidden;
  std::vector<scalar_t> scratch(2 * n + 6 * hidden);
  scalar_t* softmax = scratch.data();
  scalar_t* master_input = softmax + 2 * n;
  scalar_t* master_forget = master_input + hidden;
  scalar_t* overlap = master_forget + hidden;
  scalar_t* spare_h = overlap + hidden;  // padded rows: the computed h and c go here
  scalar_t* spare_c = spare_h + hidden;
  scalar_t* spare_tanh = spare_c + hidden;  // inference: tanh(c) is not kept
  for (int64_t b = begin; b < end; ++b) {
    scalar_t* act = a.act + b * gates;
    if (a.product != nullptr) add_rows(gates, a.added + b * gates, a.product + b * gates, act);
    scalar_t* cumax = a.cumax + b * 2 * n;
    softmax_cumsum(act, n, softmax, cumax);
    softmax_cumsum(act + n, n, softmax + n, cumax + n);
    expand_masters(cumax, n, a.chunk_size, master_input, master_forget, overlap);

    const bool real = a.real == nullptr || a.real[b];
    scalar_t* h_new = real ? a.h_new + b * hidden : spare_h;
    forward_neurons(hidden, act + 2 * n, master_input, master_forget, overlap,
                    a.c_prev + b * hidden, real ? a.c_new + b * hidden : spare_c, h_new,
                    a.tanh_cell != nullptr ? a.tanh_cell + b * hidden : spare_tanh);
    if (a.output != nullptr) {
      const scalar_t keep = real ? scalar_t(1) : scalar_t(0);
      scalar_t* output = a.output + b * hidden;
      for (int64_t j = 0; j < hidden; ++j) output[j] = h_new[j] * keep;
    }
    if (!real) {  // a padded step carries the state through unchanged
      std::memcpy(a.c_new + b * hidden, a.c_prev + b * hidden, hidden * sizeof(scalar_t));
      std::memcpy(a.h_new + b * hidden, a.h_prev + b * hidden, hidden * sizeof(scalar_t));
    }
  }
}

template <typename scalar_t>
TREERNN_INLINE void backward_rows(const BackwardArgs<scalar_t>& a, int64_t begin, int64_t end) {
  const int64_t n = a.n_chunk;
  const int64_t size = a.chunk_size;
  const int64_t hidden = n * size;
  const int64_t gates = 2 * n + 4 * hidden;
  std::vector<scalar_t> scratch(4 * n + 6 * hidden);
  scalar_t* softmax = scratch.data();
  scalar_t* grad_softmax = softmax + 2 * n;
  scalar_t* master_input = grad_softmax + 2 * n;
  scalar_t* master_forget = master_input + hidden;
  scalar_t* overlap = master_forget + hidden;
  // d c_new -> d cumsum_in, d master_forget, d overlap, per neuron (summed per chunk below)
  scalar_t* to_in = overlap + hidden;
  scalar_t* to_mf = to_in + hidden;
  scalar_t* to_ov = to_mf + hidden;
  for (int64_t b = begin; b < end; ++b) {
    const scalar_t* act = a.act + b * gates;
    const scalar_t* cumax = a.cumax + b * 2 * n;
    softmax_cumsum<scalar_t>(act, n, softmax, nullptr);
    softmax_cumsum<scalar_t>(act + n, n, softmax + n, nullptr);
    expand_masters(cumax, n, size, master_input, master_forget, overlap);

    const scalar_t* gates_row = act + 2 * n;
    scalar_t* grad_gates_row = a.grad_act + b * gates + 2 * n;
    const int64_t offset = b * hidden;
    if (a.real == nullptr) {
      backward_neurons<false>(hidden, scalar_t(1), gates_row, master_input, master_forget,
                              overlap, a.tanh_cell + offset, a.c_prev + offset,
                              a.grad_output + offset, a.grad_h + offset, a.grad_c + offset,
                              grad_gates_row, to_in, to_mf, to_ov);
    } else {
      backward_neurons<true>(hidden, a.real[b] ? scalar_t(1) : scalar_t(0), gates_row,
                             master_input, master_forget, overlap, a.tanh_cell + offset,
                             a.c_prev + offset, a.grad_output + offset, a.grad_h + offset,
                             a.grad_c + offset, grad_gates_row, to_in, to_mf, to_ov);
    }

    // Master gates: gradients of the two cumsums (input, forget), reverse cumsum (the gradient of
    // a cumsum), softmax backward.
    const scalar_t* grad_distance = a.grad_distance != nullptr ? a.grad_distance + b * 2 : nullptr;
    scalar_t* grad_logits = a.grad_act + b * gates;
    for (int64_t k = 0; k < n; ++k) {
      scalar_t sum_in = 0, sum_mf = 0, sum_ov = 0;
      for (int64_t j = k * size; j < (k + 1) * size; ++j) {
        sum_in += to_in[j];
        sum_mf += to_mf[j];
        sum_ov += to_ov[j];
      }
      // overlap = (1 - cumsum_in) * master_forget
      grad_softmax[k] = sum_in + sum_ov * -master_forget[k * size];
      grad_softmax[n + k] = sum_mf + sum_ov * master_input[k * size];
    }
    if (grad_distance != nullptr) {
      for (int64_t k = 0; k < n; ++k) grad_softmax[k] += grad_distance[0];
      for (int64_t k = 0; k < n; ++k) grad_softmax[n + k] += grad_distance[1];
    }
    for (int64_t half = 0; half < 2; ++half) {
      scalar_t* grad_cumsum = grad_softmax + half * n;
      scalar_t running = 0;
      for (int64_t k = n - 1; k >= 0; --k) {
        running += grad_cumsum[k];
        grad_cumsum[k] = running;
      }
      const scalar_t* sm = softmax + half * n;
      scalar_t dot = 0;
      for (int64_t k = 0; k < n; ++k) dot += grad_cumsum[k] * sm[k];
      for (int64_t k = 0; k < n; ++k) grad_logits[half * n + k] = sm[k] * (grad_cumsum[k] - dot);
    }
  }
}

// ---- the row loops, compiled for AVX-512, for AVX2 + FMA and for the baseline ISA -------------

// One step's rows, by the row loop of its direction (overloads: one dispatcher serves both).
template <typename scalar_t>
TREERNN_INLINE void rows(const ForwardArgs<scalar_t>& a, int64_t begin, int64_t end) {
  forward_rows(a, begin, end);
}
template <typename scalar_t>
TREERNN_INLINE void rows(const BackwardArgs<scalar_t>& a, int64_t begin, int64_t end) {
  backward_rows(a, begin, end);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
template <typename Args>
__attribute__((target("avx2,fma"))) void rows_avx2(const Args& a, int64_t begin, int64_t end) {
  rows(a, begin, end);
}
template <typename Args>
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma,prefer-vector-width=512"))) void
rows_avx512(const Args& a, int64_t begin, int64_t end) {
  rows(a, begin, end);
}
#endif

template <typename Args>
void rows_baseline(const Args& a, int64_t begin, int64_t end) {
  rows(a, begin, end);
}

// The best copy of the row loop this CPU runs.
template <typename Args>
void run_rows(const Args& a, int64_t begin, int64_t end) {
#ifdef TREERNN_HAS_AVX2_COPY
  if (cpu_has_avx512()) return rows_avx512(a, begin, end);
  if (cpu_has_avx2()) return rows_avx2(a, begin, end);
#endif
  rows_baseline(a, begin, end);
}

// Rows per thread: enough elementwise work (about 64k gate values) to be worth a thread, so that
// small batches run on the calling thread alone.
int64_t grain_size(int64_t gates) { return std::max<int64_t>(1, (int64_t{1} << 16) / gates); }

void check(const at::Tensor& tensor, const char* name, const at::Tensor& like, int64_t rows,
           int64_t columns) {
  TORCH_CHECK(tensor.device().is_cpu() && tensor.scalar_type() == like.scalar_type(), name,
              " must be a CPU tensor of dtype ", like.scalar_type());
  TORCH_CHECK(tensor.is_contiguous() && tensor.numel() == rows * columns, name,
              " must be contiguous with ", rows, " x ", columns, " elements, got ", tensor.sizes());
}

const bool* mask_pointer(const std::optional<at::Tensor>& real, int64_t batch) {
  if (!real.has_value()) return nullptr;
  TORCH_CHECK(real->scalar_type() == at::kBool && real->is_contiguous() &&
                  real->numel() == batch,
              "the step mask must be a contiguous bool tensor of ", batch, " elements");
  return real->data_ptr<bool>();
}

template <typename T>
T* optional_pointer(const std::optional<at::Tensor>& tensor) {
  return tensor.has_value() ? tensor->data_ptr<T>() : nullptr;
}

struct StepShape {
  int64_t batch, gates, n_chunk, hidden;
};

// The sizes of one step with B rows of G = 2n + 4H pre-activations, checked.
StepShape gate_shape(int64_t batch, int64_t gates, int64_t chunk_size, at::ScalarType dtype) {
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kDouble,
              "the fused ON-LSTM step runs float32 and float64 only");
  TORCH_CHECK(chunk_size > 0 && gates % (4 * chunk_size + 2) == 0,
              "G = ", gates, " is not 2n + 4H for chunk_size ", chunk_size);
  const int64_t n_chunk = gates / (4 * chunk_size + 2);
  return {batch, gates, n_chunk, n_chunk * chunk_size};
}

// The sizes of one step from the pre-activations act (..., B, G = 2n + 4H), checked.
StepShape step_shape(const at::Tensor& act, int64_t chunk_size) {
  TORCH_CHECK(act.dim() >= 2, "act must be (B, G) or (T, B, G)");
  const StepShape shape = gate_shape(act.size(act.dim() - 2), act.size(act.dim() - 1),
                                     chunk_size, act.scalar_type());
  check(act, "act", act, act.numel() / std::max<int64_t>(1, shape.gates), shape.gates);
  return shape;
}

void forward_step(const at::Tensor& act, const std::optional<at::Tensor>& product,
                  const std::optional<at::Tensor>& added, const at::Tensor& cumax,
                  const at::Tensor& c_prev,
                  const at::Tensor& h_prev, const at::Tensor& c_new, const at::Tensor& h_new,
                  const std::optional<at::Tensor>& output,
                  const std::optional<at::Tensor>& tanh_cell,
                  const std::optional<at::Tensor>& real, int64_t chunk_size) {
  const StepShape shape = step_shape(act, chunk_size);
  const int64_t batch = shape.batch, gates = shape.gates, n_chunk = shape.n_chunk;
  const int64_t hidden = shape.hidden;
  TORCH_CHECK(product.has_value() == added.has_value(), "give both product and added, or neither");
  if (product.has_value()) {
    check(*product, "product", act, batch, gates);
    check(*added, "added", act, batch, gates);
  }
  check(cumax, "cumax", act, batch, 2 * n_chunk);
  for (const auto* tensor : {&c_prev, &h_prev, &c_new, &h_new})
    check(*tensor, "state", act, batch, hidden);
  if (output.has_value()) check(*output, "output", act, batch, hidden);
  if (tanh_cell.has_value()) check(*tanh_cell, "tanh_cell", act, batch, hidden);
  const bool* mask = mask_pointer(real, batch);
  AT_DISPATCH_FLOATING_TYPES(act.scalar_type(), "onlstm_forward_step", [&] {
    const ForwardArgs<scalar_t> args{act.data_ptr<scalar_t>(), optional_pointer<scalar_t>(product),
                                     optional_pointer<scalar_t>(added), cumax.data_ptr<scalar_t>(),
                                     c_prev.data_ptr<scalar_t>(), h_prev.data_ptr<scalar_t>(),
                                     c_new.data_ptr<scalar_t>(), h_new.data_ptr<scalar_t>(),
                                     optional_pointer<scalar_t>(output),
                                     optional_pointer<scalar_t>(tanh_cell), mask, n_chunk,
                                     chunk_size};
    at::parallel_for(0, batch, grain_size(gates), [&](int64_t begin, int64_t end) {
      run_rows(args, begin, end);
    });
  });
}

void backward_step(const at::Tensor& act, const at::Tensor& cumax, const at::Tensor& tanh_cell,
                   const at::Tensor& c_prev, const at::Tensor& grad_output,
                   const std::optional<at::Tensor>& grad_distance, const at::Tensor& grad_h,
                   const at::Tensor& grad_c, const at::Tensor& grad_act,
                   const std::optional<at::Tensor>& real, int64_t chunk_size) {
  const StepShape shape = step_shape(act, chunk_size);
  const int64_t batch = shape.batch, gates = shape.gates, n_chunk = shape.n_chunk;
  const int64_t hidden = shape.hidden;
  check(grad_act, "grad_act", act, batch, gates);
  check(cumax, "cumax", act, batch, 2 * n_chunk);
  for (const auto* tensor : {&tanh_cell, &c_prev, &grad_output, &grad_h, &grad_c})
    check(*tensor, "state", act, batch, hidden);
  if (grad_distance.has_value()) check(*grad_distance, "grad_distance", act, batch, 2);
  const bool* mask = mask_pointer(real, batch);
  AT_DISPATCH_FLOATING_TYPES(act.scalar_type(), "onlstm_backward_step", [&] {
    const BackwardArgs<scalar_t> args{act.data_ptr<scalar_t>(), cumax.data_ptr<scalar_t>(),
                                      tanh_cell.data_ptr<scalar_t>(), c_prev.data_ptr<scalar_t>(),
                                      grad_output.data_ptr<scalar_t>(),
                                      optional_pointer<scalar_t>(grad_distance),
                                      grad_h.data_ptr<scalar_t>(), grad_c.data_ptr<scalar_t>(),
                                      grad_act.data_ptr<scalar_t>(), mask, n_chunk, chunk_size};
    at::parallel_for(0, batch, grain_size(gates), [&](int64_t begin, int64_t end) {
      run_rows(args, begin, end);
    });
  });
}

// ---- whole sequences: the per-step products (packed_gemm.h) and the elementwise work in one
// parallel region, a barrier after each; no call back into Python or torch per step ------------

int64_t region_threads() { return std::max<int64_t>(1, at::get_num_threads()); }

struct Team {
  int64_t thread, threads;
  int64_t row_begin(int64_t rows) const { return rows * thread / threads; }
  int64_t row_end(int64_t rows) const { return rows * (thread + 1) / threads; }
};

TREERNN_INLINE void team_barrier() {
#ifdef _OPENMP
#pragma omp barrier
#endif
}

// Runs body(team) on every thread of one parallel region (one thread without OpenMP).
template <typename F>
void in_parallel(F&& body) {
#ifdef _OPENMP
  const int64_t wanted = region_threads();
#pragma omp parallel num_threads(wanted)
  body(Team{omp_get_thread_num(), omp_get_num_threads()});
#else
  body(Team{0, 1});
#endif
}

// Whether ``packed`` (a weight of ``outputs`` x ``depth`` packed by packed_gemm's ``pack``) holds
// bf16 pairs; checked against the states ``like``.
bool check_packed(const at::Tensor& packed, int64_t outputs, int64_t depth,
                  const at::Tensor& like) {
  const bool bf16 = packed.scalar_type() == at::kBFloat16;
  TORCH_CHECK(packed.size(0) == panels_of(outputs) &&
                  packed.size(1) == (bf16 ? (depth + 1) / 2 : depth),
              "the weight must be packed by packed_gemm.pack, ", outputs, " x ", depth);
  TORCH_CHECK(!bf16 || (like.scalar_type() == at::kFloat && cpu_has_bf16_pairs()),
              "bf16 products: float32 states and a CPU with AVX512-BF16");
  TORCH_CHECK(bf16 || packed.scalar_type() == like.scalar_type(),
              "the packed weight must have the states' dtype");
  return bf16;
}

template <typename scalar_t>
scalar_t* step_of(const std::optional<at::Tensor>& tensor, int64_t t, int64_t size) {
  return tensor.has_value() ? tensor->data_ptr<scalar_t>() + t * size : nullptr;
}

// The buffers of a forward loop over T steps (forward_step's, one per step), checked. Both
// forward_sequence and forward_sequence_projected fill them.
template <typename scalar_t>
struct ForwardBuffers {
  scalar_t* h;            // (T + 1, B, H), or a ring of state_slots states
  scalar_t* c;            // (T + 1, B, H), or a ring of state_slots states
  scalar_t* outputs;      // (T, B, H) or null (unmasked: the outputs are h[1:]), or a ring
  scalar_t* cumaxes;      // (T, B, 2, n), or a ring of step_slots steps
  scalar_t* activations;  // (T, B, G) or null (inference: one (B, G) buffer serves every step)
  scalar_t* tanh_cells;   // (T, B, H) or null
  scalar_t* gates_buffer; // (B, G) or null
  const bool* masks;      // (T, B) or null
  // T + 1 and T: every state and step kept; 2 and 1 (infer_projected): a ring that keeps the
  // last state and the step being written only
  int64_t state_slots, step_slots;
  int64_t state(int64_t s) const { return s % state_slots; }  // state s's slot (s in [0, T])
  int64_t step(int64_t t) const { return t % step_slots; }    // step t's slot
};

template <typename scalar_t>
ForwardBuffers<scalar_t> forward_buffers(
    int64_t steps, const StepShape& shape, const at::Tensor& like, const at::Tensor& hs,
    const at::Tensor& cs, const std::optional<at::Tensor>& outputs, const at::Tensor& cumaxes,
    const std::optional<at::Tensor>& activations, const std::optional<at::Tensor>& tanh_cells,
    const std::optional<at::Tensor>& gates_buffer, const std::optional<at::Tensor>& step_mask) {
  const int64_t batch = shape.batch, gates = shape.gates, hidden = shape.hidden;
  check(hs, "hs", like, (steps + 1) * batch, hidden);
  check(cs, "cs", like, (steps + 1) * batch, hidden);
  check(cumaxes, "cumaxes", like, steps * batch, 2 * shape.n_chunk);
  if (outputs.has_value()) check(*outputs, "outputs", like, steps * batch, hidden);
  TORCH_CHECK(activations.has_value() == tanh_cells.has_value() &&
                  activations.has_value() != gates_buffer.has_value(),
              "give activations and tanh_cells, or gates_buffer");
  if (activations.has_value()) {
    check(*activations, "activations", like, steps * batch, gates);
    check(*tanh_cells, "tanh_cells", like, steps * batch, hidden);
  } else {
    check(*gates_buffer, "gates_buffer", like, batch, gates);
  }
  return {hs.data_ptr<scalar_t>(), cs.data_ptr<scalar_t>(), optional_pointer<scalar_t>(outputs),
          cumaxes.data_ptr<scalar_t>(), optional_pointer<scalar_t>(activations),
          optional_pointer<scalar_t>(tanh_cells), optional_pointer<scalar_t>(gates_buffer),
          mask_pointer(step_mask, steps * batch), steps + 1, steps};
}

// The loop both forward sequences share, in one parallel region: per step t, each thread runs
// product(team, t, act) (its panels of the step's pre-activations act), a barrier, its rows'
// elementwise work (forward_step's), then after_rows(team, t, rows_begin, rows_end) (preparing
// its rows of the next step's product operand), a barrier.
//
// With ``own_rows`` each thread's product covers all the outputs of its own batch rows instead
// (product(team, t, act) then computes rows [rows_begin, rows_end)): the batch rows are
// independent sequences, so the threads never wait for each other, at the price of each
// reading the whole weight at every step.
template <typename scalar_t, typename Product_, typename AfterRows>
void forward_loop(int64_t steps, const StepShape& shape, const ForwardBuffers<scalar_t>& b,
                  int64_t chunk_size, Product_&& product, AfterRows&& after_rows,
                  bool own_rows = false) {
  const int64_t batch = shape.batch, gates = shape.gates, hidden = shape.hidden;
  const int64_t n_chunk = shape.n_chunk;
  in_parallel([&](const Team& team) {
    const int64_t rb = team.row_begin(batch), re = team.row_end(batch);
    for (int64_t t = 0; t < steps; ++t) {
      scalar_t* act = b.activations != nullptr ? b.activations + t * batch * gates
                                               : b.gates_buffer;
      product(team, t, act);
      if (!own_rows) team_barrier();
      const ForwardArgs<scalar_t> args{
          act, nullptr, nullptr, b.cumaxes + b.step(t) * batch * 2 * n_chunk,
          b.c + b.state(t) * batch * hidden, b.h + b.state(t) * batch * hidden,
          b.c + b.state(t + 1) * batch * hidden, b.h + b.state(t + 1) * batch * hidden,
          b.outputs == nullptr ? nullptr : b.outputs + b.step(t) * batch * hidden,
          b.tanh_cells == nullptr ? nullptr : b.tanh_cells + t * batch * hidden,
          b.masks == nullptr ? nullptr : b.masks + t * batch, n_chunk, chunk_size};
      if (rb < re) run_rows(args, rb, re);
      after_rows(team, t, rb, re);
      if (!own_rows) team_barrier();
    }
  });
}

// The forward loop of ONLSTMRecurrence over all T steps: per step, act = input_gates[t] +
// hs[t] @ W^T (W packed by packed_gemm's ``pack``: float panels, or bf16 pairs, then the products
// run in bf16 with float32 sums), then what forward_step does. Buffers as forward_step's, per step.
void forward_sequence(const at::Tensor& input_gates, const at::Tensor& packed,
                      const at::Tensor& hs, const at::Tensor& cs,
                      const std::optional<at::Tensor>& outputs, const at::Tensor& cumaxes,
                      const std::optional<at::Tensor>& activations,
                      const std::optional<at::Tensor>& tanh_cells,
                      const std::optional<at::Tensor>& gates_buffer,
                      const std::optional<at::Tensor>& step_mask, int64_t chunk_size,
                      int64_t isa) {
  TORCH_CHECK(input_gates.dim() == 3, "input_gates must be (T, B, G)");
  const int64_t steps = input_gates.size(0), batch = input_gates.size(1);
  if (steps == 0 || batch == 0) return;
  const StepShape shape = step_shape(input_gates, chunk_size);
  const int64_t gates = shape.gates, hidden = shape.hidden;
  check(input_gates, "input_gates", input_gates, steps * batch, gates);
  const bool bf16 = check_packed(packed, gates, hidden, input_gates);
  const int64_t chosen_isa = isa_for(isa);
  const int64_t pairs = (hidden + 1) / 2;
  std::vector<uint32_t> h_pairs(bf16 ? batch * pairs : 0);
  AT_DISPATCH_FLOATING_TYPES(input_gates.scalar_type(), "onlstm_forward_sequence", [&] {
    const ForwardBuffers<scalar_t> b = forward_buffers<scalar_t>(
        steps, shape, input_gates, hs, cs, outputs, cumaxes, activations, tanh_cells,
        gates_buffer, step_mask);
    const scalar_t* added = input_gates.data_ptr<scalar_t>();
    if (bf16) to_bf16_pairs(reinterpret_cast<const float*>(b.h), hidden, hidden, 0, batch,
                            h_pairs.data());
    auto product = [&](const Team& team, int64_t t, scalar_t* act) {
      const PanelRange mine = panel_share(gates, team.thread, team.threads);
      if (bf16) {
        const Product<uint32_t, uint32_t, float> m{
            h_pairs.data(), pairs, batch, pairs,
            reinterpret_cast<const uint32_t*>(packed.data_ptr<at::BFloat16>()), gates,
            reinterpret_cast<float*>(act), gates,
            reinterpret_cast<const float*>(added + t * batch * gates), gates};
        product_panels_bf16(m, mine.begin, mine.end);
      } else {
        const Product<scalar_t, scalar_t, scalar_t> m{
            b.h + t * batch * hidden, hidden, batch, hidden, packed.data_ptr<scalar_t>(), gates,
            act, gates, added + t * batch * gates, gates};
        product_panels(m, mine.begin, mine.end, chosen_isa);
      }
    };
    auto after_rows = [&](const Team&, int64_t t, int64_t rb, int64_t re) {
      if (bf16)
        to_bf16_pairs(reinterpret_cast<const float*>(b.h + (t + 1) * batch * hidden), hidden,
                      hidden, rb, re, h_pairs.data());
    };
    forward_loop<scalar_t>(steps, shape, b, chunk_size, product, after_rows);
  });
}

// Rows [begin, end) of one step's product operand [x_t | h_t] (B, D + H), gathered from the
// step's inputs x_t (rows ``x_row_stride`` apart) and states h_t (contiguous rows).
template <typename scalar_t>
void gather_operand(const scalar_t* x, int64_t x_row_stride, int64_t depth, const scalar_t* h,
                    int64_t hidden, int64_t begin, int64_t end, scalar_t* operand) {
  for (int64_t r = begin; r < end; ++r) {
    scalar_t* row = operand + r * (depth + hidden);
    std::memcpy(row, x + r * x_row_stride, depth * sizeof(scalar_t));
    std::memcpy(row + depth, h + r * hidden, hidden * sizeof(scalar_t));
  }
}


// [W_ih | scale * W_hh] (G x (D + H)) packed as packed_gemm's ``pack`` packs one weight, read
// straight from the two contiguous weights (no concatenated copy first): the weight of
// forward_sequence_projected, packed once per call (DropConnect gives each call its own).
at::Tensor pack_projected_bf16(const at::Tensor& input_weight,
                               const at::Tensor& recurrent_weight, double scale);

at::Tensor pack_projected(const at::Tensor& input_weight, const at::Tensor& recurrent_weight,
                          double scale, bool bf16 = false) {
  if (bf16) return pack_projected_bf16(input_weight, recurrent_weight, scale);
  TORCH_CHECK(input_weight.dim() == 2 && recurrent_weight.dim() == 2 &&
                  input_weight.size(0) == recurrent_weight.size(0) &&
                  input_weight.is_contiguous() && recurrent_weight.is_contiguous() &&
                  input_weight.scalar_type() == recurrent_weight.scalar_type() &&
                  input_weight.device().is_cpu() && recurrent_weight.device().is_cpu(),
              "pack_projected: two contiguous CPU weights (G, D) and (G, H) of one dtype");
  const int64_t outputs = input_weight.size(0), depth = input_weight.size(1);
  const int64_t hidden = recurrent_weight.size(1), width = depth + hidden;
  const int64_t panels = panels_of(outputs);
  at::Tensor packed = at::empty({panels, width, kPanel}, input_weight.options());
  AT_DISPATCH_FLOATING_TYPES(input_weight.scalar_type(), "onlstm_pack_projected", [&] {
    const scalar_t* w_ih = input_weight.data_ptr<scalar_t>();
    const scalar_t* w_hh = recurrent_weight.data_ptr<scalar_t>();
    const scalar_t factor = static_cast<scalar_t>(scale);
    scalar_t* out = packed.data_ptr<scalar_t>();
    at::parallel_for(0, panels, 1, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        scalar_t* panel = out + p * width * kPanel;
        const int64_t valid = std::min(kPanel, outputs - p * kPanel);
        if (valid < kPanel) std::fill(panel, panel + width * kPanel, scalar_t(0));
        const scalar_t* rows_ih = w_ih + p * kPanel * depth;
        const scalar_t* rows_hh = w_hh + p * kPanel * hidden;
        // float32 full panels transposed in registers (the casts only run for float; the
        // dispatch lambda is not a template, so the branch is compiled for double too)
        if (std::is_same_v<scalar_t, float> && valid == kPanel) {
          float* out_panel = reinterpret_cast<float*>(panel);
          pack_full_panel(reinterpret_cast<const float*>(rows_ih), depth, depth, 1.0f,
                          out_panel);
          pack_full_panel(reinterpret_cast<const float*>(rows_hh), hidden, hidden,
                          static_cast<float>(factor), out_panel + depth * kPanel);
          continue;
        }
        // along k, the panel's 16 outputs at a time: contiguous writes, 16 rows read in step
        for (int64_t k = 0; k < depth; ++k)
          for (int64_t i = 0; i < valid; ++i) panel[k * kPanel + i] = rows_ih[i * depth + k];
        for (int64_t k = 0; k < hidden; ++k)
          for (int64_t i = 0; i < valid; ++i)
            panel[(depth + k) * kPanel + i] = rows_hh[i * hidden + k] * factor;
      }
    });
  });
  return packed;
}

#ifdef TREERNN_X86_KERNELS
// words[i] = bf16(even[i]) | bf16(odd[i]) << 16 for the 16 outputs of a panel (odd null: 0).
TREERNN_AVX512 inline void pair_words_avx512(const float* even, const float* odd,
                                             uint32_t* words) {
  __m512i pair = bf16_lanes(_mm512_loadu_ps(even));
  if (odd != nullptr)
    pair = _mm512_or_si512(pair, _mm512_slli_epi32(bf16_lanes(_mm512_loadu_ps(odd)), 16));
  _mm512_storeu_si512(words, pair);
}
#endif

// [W_ih | scale * W_hh] as packed_gemm's bf16 pairs (P, ceil((D + H) / 2), 16, 2): packed in
// float32 first (pack_projected), then rounded to bf16 (nearest even, as c10::BFloat16) two k at
// a time, 16 outputs per vector. The same words as packed_gemm's ``pack`` of the concatenated
// weight in bf16.
at::Tensor pack_projected_bf16(const at::Tensor& input_weight,
                               const at::Tensor& recurrent_weight, double scale) {
  TORCH_CHECK(input_weight.scalar_type() == at::kFloat && cpu_has_bf16_pairs(),
              "pack_projected in bf16: float32 weights and a CPU with AVX512-BF16");
  const int64_t outputs = input_weight.size(0);
  const int64_t width = input_weight.size(1) + recurrent_weight.size(1);
  const int64_t panels = panels_of(outputs), pairs = (width + 1) / 2;
  const at::Tensor single = pack_projected(input_weight, recurrent_weight, scale);
  at::Tensor packed =
      at::empty({panels, pairs, kPanel, 2}, input_weight.options().dtype(at::kBFloat16));
  const float* from = single.data_ptr<float>();
  uint32_t* to = reinterpret_cast<uint32_t*>(packed.data_ptr<at::BFloat16>());
  at::parallel_for(0, panels * pairs, 256, [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {  // pair q % pairs of panel q / pairs
      const int64_t p = q / pairs, k = 2 * (q % pairs);
      const float* even = from + (p * width + k) * kPanel;  // k's 16 outputs, then k + 1's
      const bool odd = k + 1 < width;
#ifdef TREERNN_X86_KERNELS
      if (cpu_has_avx512()) {
        pair_words_avx512(even, odd ? even + kPanel : nullptr, to + q * kPanel);
        continue;
      }
#endif
      uint16_t* words = reinterpret_cast<uint16_t*>(to + q * kPanel);
      for (int64_t i = 0; i < kPanel; ++i) {
        words[2 * i] = bf16_bits(even[i]);
        words[2 * i + 1] = odd ? bf16_bits(even[kPanel + i]) : uint16_t(0);
      }
    }
  });
  return packed;
}

// The forward loop with the input projection inside it, on checked buffers ``b`` (full or ring):
// per step, act = bias + [x_t | h_t] @ [W_ih | W_hh]^T, one product over the inputs and the
// states together (``packed``: the (G, D + H) weight packed by pack_projected), so that no
// (T, B, G) input projection is written and read back, and the projection runs on the same
// panels, in the same threads, as the recurrent product. ``x`` (T, B, D) may have any strides
// over T and B (``step_stride``, ``row_stride``; e.g. a transposed batch-first tensor).
//
// Two more results, written by each thread for its rows while they are in its cache: given
// ``first`` (B, T, H), the outputs in batch-first order (a batch-first encoder then needs no
// transposing copy); given ``distance`` (T, B, 2), the input and forget distances
// 1 - sum(cumsum) / n (zero at padded steps).
template <typename scalar_t>
void projected_loop(const scalar_t* x, int64_t step_stride, int64_t row_stride, int64_t steps,
                    int64_t depth, const scalar_t* bias, const void* packed,
                    const StepShape& shape, const ForwardBuffers<scalar_t>& b,
                    int64_t chunk_size, scalar_t* first, scalar_t* distance, bool own_rows,
                    int64_t isa, bool bf16 = false) {
  const int64_t batch = shape.batch, gates = shape.gates, hidden = shape.hidden;
  const int64_t n_chunk = shape.n_chunk, width = depth + hidden, pairs = (width + 1) / 2;
  // [x_t | h_t], one row per batch row (a tensor: 64-byte aligned rows start); with bf16
  // products also as bf16 pairs, converted by each row's owner after gathering it
  const at::Tensor operand_rows =
      at::empty({batch, width}, at::TensorOptions().dtype(c10::CppTypeToScalarType<scalar_t>::value));
  const at::Tensor operand_words =
      at::empty({bf16 ? batch : 0, pairs}, at::TensorOptions().dtype(at::kInt));
  scalar_t* operand = operand_rows.data_ptr<scalar_t>();
  uint32_t* operand_pairs = reinterpret_cast<uint32_t*>(operand_words.data_ptr<int32_t>());
  auto gather = [&](const scalar_t* x_t, const scalar_t* h_t, int64_t rb, int64_t re) {
    gather_operand(x_t, row_stride, depth, h_t, hidden, rb, re, operand);
    if constexpr (std::is_same_v<scalar_t, float>) {
      if (bf16) to_bf16_pairs(operand, width, width, rb, re, operand_pairs);
    }
  };
  gather(x, b.h, 0, batch);
  auto product = [&](const Team& team, int64_t, scalar_t* act) {
    // ld_added 0: every row adds the bias. Tiles of 8 rows over the long operand rows (12
    // rows of 2 KiB and two weight panels crowd a 32 KiB L1; measured 2-7 % faster)
    const int64_t max_rows = width > 384 ? 8 : 12;
    if constexpr (std::is_same_v<scalar_t, float>) {
      if (bf16) {
        const int64_t rb = own_rows ? team.row_begin(batch) : 0;
        const int64_t re = own_rows ? team.row_end(batch) : batch;
        const PanelRange mine = own_rows ? PanelRange{0, panels_of(gates)}
                                         : panel_share(gates, team.thread, team.threads);
        if (rb == re) return;
        const Product<uint32_t, uint32_t, float> m{
            operand_pairs + rb * pairs, pairs, re - rb, pairs,
            static_cast<const uint32_t*>(packed), gates, act + rb * gates, gates, bias, 0,
            max_rows};
        product_panels_bf16(m, mine.begin, mine.end);
        return;
      }
    }
    const scalar_t* panels = static_cast<const scalar_t*>(packed);
    if (own_rows) {
      const int64_t rb = team.row_begin(batch), re = team.row_end(batch);
      if (rb == re) return;
      const Product<scalar_t, scalar_t, scalar_t> m{
          operand + rb * width, width, re - rb, width, panels, gates, act + rb * gates, gates,
          bias, 0, max_rows};
      product_panels(m, 0, panels_of(gates), isa);
      return;
    }
    const PanelRange mine = panel_share(gates, team.thread, team.threads);
    const Product<scalar_t, scalar_t, scalar_t> m{
        operand, width, batch, width, panels, gates, act, gates, bias, 0, max_rows};
    product_panels(m, mine.begin, mine.end, isa);
  };
  auto after_rows = [&](const Team&, int64_t t, int64_t rb, int64_t re) {
    if (t + 1 < steps)
      gather(x + (t + 1) * step_stride, b.h + b.state(t + 1) * batch * hidden, rb, re);
    const scalar_t* step_outputs = b.outputs != nullptr
                                       ? b.outputs + b.step(t) * batch * hidden
                                       : b.h + b.state(t + 1) * batch * hidden;
    for (int64_t r = rb; r < re; ++r) {
      if (first != nullptr)
        std::memcpy(first + (r * steps + t) * hidden, step_outputs + r * hidden,
                    hidden * sizeof(scalar_t));
      if (distance != nullptr) {
        const bool real = b.masks == nullptr || b.masks[t * batch + r];
        const scalar_t* cumax = b.cumaxes + (b.step(t) * batch + r) * 2 * n_chunk;
        for (int64_t j = 0; j < 2; ++j) {
          scalar_t total = 0;
          for (int64_t k = 0; k < n_chunk; ++k) total += cumax[j * n_chunk + k];
          distance[(t * batch + r) * 2 + j] =
              real ? scalar_t(1) - total / static_cast<scalar_t>(n_chunk) : scalar_t(0);
        }
      }
    }
  };
  forward_loop<scalar_t>(steps, shape, b, chunk_size, product, after_rows, own_rows);
}

void check_inputs(const at::Tensor& inputs) {
  TORCH_CHECK(inputs.dim() == 3 && inputs.device().is_cpu() &&
                  (inputs.size(2) <= 1 || inputs.stride(2) == 1),
              "inputs must be a CPU (T, B, D) tensor with contiguous rows");
}

// projected_loop on the caller's buffers (the training node's forward pass, and the tests):
// ``packed`` from pack_projected, the buffers as forward_sequence's; ``batch_first`` and
// ``distances`` as projected_loop's ``first`` and ``distance``.
void forward_sequence_projected(const at::Tensor& inputs, const at::Tensor& bias,
                                const at::Tensor& packed, const at::Tensor& hs,
                                const at::Tensor& cs, const std::optional<at::Tensor>& outputs,
                                const at::Tensor& cumaxes,
                                const std::optional<at::Tensor>& activations,
                                const std::optional<at::Tensor>& tanh_cells,
                                const std::optional<at::Tensor>& gates_buffer,
                                const std::optional<at::Tensor>& step_mask, int64_t chunk_size,
                                const std::optional<at::Tensor>& batch_first,
                                const std::optional<at::Tensor>& distances, bool own_rows,
                                int64_t isa) {
  check_inputs(inputs);
  TORCH_CHECK(bias.dim() == 1, "bias must be (G,)");
  const int64_t steps = inputs.size(0), batch = inputs.size(1), depth = inputs.size(2);
  if (steps == 0 || batch == 0) return;
  const StepShape shape = gate_shape(batch, bias.size(0), chunk_size, inputs.scalar_type());
  const int64_t hidden = shape.hidden;
  check(bias, "bias", inputs, 1, shape.gates);
  const bool bf16 = check_packed(packed, shape.gates, depth + hidden, inputs);
  AT_DISPATCH_FLOATING_TYPES(inputs.scalar_type(), "onlstm_forward_sequence_projected", [&] {
    const ForwardBuffers<scalar_t> b = forward_buffers<scalar_t>(
        steps, shape, inputs, hs, cs, outputs, cumaxes, activations, tanh_cells, gates_buffer,
        step_mask);
    if (batch_first.has_value()) check(*batch_first, "batch_first", inputs, batch * steps, hidden);
    if (distances.has_value()) check(*distances, "distances", inputs, steps * batch, 2);
    projected_loop<scalar_t>(inputs.data_ptr<scalar_t>(), inputs.stride(0), inputs.stride(1),
                             steps, depth, bias.data_ptr<scalar_t>(), packed.data_ptr(), shape,
                             b, chunk_size, optional_pointer<scalar_t>(batch_first),
                             optional_pointer<scalar_t>(distances), own_rows, isa_for(isa),
                             bf16);
  });
}

// Inference in one call: bias (+ recurrent_bias), [W_ih | scale * W_hh] packed, the buffers
// allocated here (the states and the step's cumsums as rings: only the last state is kept, so
// nothing of size T x B x H is written but the batch-first outputs), then projected_loop. h0 and
// c0 default to zeros. Returns (outputs (B, T, H), h_last, c_last (B, H), distances (T, B, 2) =
// (input, forget)).
std::vector<at::Tensor> infer_projected(
    const at::Tensor& inputs, const at::Tensor& input_weight, const at::Tensor& recurrent_weight,
    double scale, const at::Tensor& bias, const std::optional<at::Tensor>& recurrent_bias,
    const std::optional<at::Tensor>& h0, const std::optional<at::Tensor>& c0,
    const std::optional<at::Tensor>& step_mask, int64_t chunk_size, bool own_rows, int64_t isa,
    bool bf16) {
  check_inputs(inputs);
  const int64_t steps = inputs.size(0), batch = inputs.size(1), depth = inputs.size(2);
  TORCH_CHECK(bias.dim() == 1, "bias must be (G,)");
  const StepShape shape = gate_shape(batch, bias.size(0), chunk_size, inputs.scalar_type());
  const int64_t hidden = shape.hidden, gates = shape.gates;
  const at::TensorOptions options = inputs.options();
  // both biases in one (G,) vector of the inputs' dtype
  at::Tensor biases = bias.to(inputs.scalar_type()).contiguous();
  check(biases, "bias", inputs, 1, gates);
  if (recurrent_bias.has_value()) {
    TORCH_CHECK(recurrent_bias->dim() == 1 && recurrent_bias->size(0) == gates,
                "recurrent_bias must be (G,) = (", gates, ",)");
    biases = at::add(biases, recurrent_bias->to(inputs.scalar_type()));
  }
  const at::Tensor states = at::empty({2, 2, batch, hidden}, options);  // (h, c) x two slots
  for (int64_t i = 0; i < 2; ++i) {
    const std::optional<at::Tensor>& given = i == 0 ? h0 : c0;
    if (given.has_value()) {
      TORCH_CHECK(given->dim() == 2 && given->size(0) == batch && given->size(1) == hidden,
                  i == 0 ? "h0" : "c0", " must be (B, H) = (", batch, ", ", hidden, "), got ",
                  given->sizes());
      states[i][0].copy_(*given);
    } else {
      states[i][0].zero_();
    }
  }
  at::Tensor outputs = at::empty({batch, steps, hidden}, options);
  at::Tensor distances = at::empty({steps, batch, 2}, options);
  const int64_t last = steps % 2;
  if (steps == 0 || batch == 0) return {outputs, states[0][last], states[1][last], distances};
  const bool* mask = mask_pointer(step_mask, steps * batch);
  TORCH_CHECK(input_weight.scalar_type() == inputs.scalar_type() &&
                  input_weight.size(0) == gates && input_weight.size(1) == depth &&
                  recurrent_weight.size(0) == gates && recurrent_weight.size(1) == hidden,
              "infer_projected: weights (G, D) = (", gates, ", ", depth, ") and (G, H) = (", gates,
              ", ", hidden, ") of the inputs' dtype");
  const at::Tensor packed =
      pack_projected(input_weight.contiguous(), recurrent_weight.contiguous(), scale, bf16);
  const at::Tensor cumaxes = at::empty({batch, 2 * shape.n_chunk}, options);
  const at::Tensor gates_buffer = at::empty({batch, gates}, options);
  // masked: each step's outputs (zero at padded steps) before they are copied batch-first
  const at::Tensor step_outputs = at::empty({mask != nullptr ? batch : 0, hidden}, options);
  AT_DISPATCH_FLOATING_TYPES(inputs.scalar_type(), "onlstm_infer_projected", [&] {
    scalar_t* h = states.data_ptr<scalar_t>();
    const ForwardBuffers<scalar_t> b{
        h, h + 2 * batch * hidden,
        mask != nullptr ? step_outputs.data_ptr<scalar_t>() : nullptr,
        cumaxes.data_ptr<scalar_t>(), nullptr, nullptr, gates_buffer.data_ptr<scalar_t>(),
        mask, 2, 1};
    projected_loop<scalar_t>(inputs.data_ptr<scalar_t>(), inputs.stride(0), inputs.stride(1),
                             steps, depth, biases.data_ptr<scalar_t>(), packed.data_ptr(), shape,
                             b, chunk_size, outputs.data_ptr<scalar_t>(),
                             distances.data_ptr<scalar_t>(), own_rows, isa_for(isa), bf16);
  });
  return {outputs, states[0][last], states[1][last], distances};
}

// The reverse loop of ONLSTMRecurrence.backward over all T steps: per step, what backward_step
// does, then grad_h = grad_gates[t] @ W (+ the part of grad_h that skips a padded step), with
// W^T (H x G) packed by packed_gemm's ``pack`` (bf16 pairs: the products in bf16). grad_h and
// grad_c (B, H) come in as the gradients reaching the last state and leave as those of h0, c0.
// grad_bias (G,), when given, receives the sum of grad_gates over steps and rows (the bias's
// gradient), added while each step's rows are still in cache: every thread sums its own gates
// over all rows, steps from last to first and rows in order, so the sums do not depend on the
// thread count.
void backward_sequence(const at::Tensor& packed_t, const at::Tensor& activations,
                       const at::Tensor& cumaxes, const at::Tensor& tanh_cells,
                       const at::Tensor& cs, const at::Tensor& grad_outputs,
                       const std::optional<at::Tensor>& distance_grads, const at::Tensor& grad_h,
                       const at::Tensor& grad_c, const at::Tensor& grad_gates,
                       const std::optional<at::Tensor>& step_mask, int64_t chunk_size,
                       const std::optional<at::Tensor>& grad_bias, int64_t isa) {
  TORCH_CHECK(activations.dim() == 3, "activations must be (T, B, G)");
  const int64_t steps = activations.size(0), batch = activations.size(1);
  if (steps == 0 || batch == 0) return;
  const StepShape shape = step_shape(activations, chunk_size);
  const int64_t gates = shape.gates, n_chunk = shape.n_chunk, hidden = shape.hidden;
  check(activations, "activations", activations, steps * batch, gates);
  check(grad_gates, "grad_gates", activations, steps * batch, gates);
  check(cumaxes, "cumaxes", activations, steps * batch, 2 * n_chunk);
  check(tanh_cells, "tanh_cells", activations, steps * batch, hidden);
  check(cs, "cs", activations, (steps + 1) * batch, hidden);
  check(grad_outputs, "grad_outputs", activations, steps * batch, hidden);
  check(grad_h, "grad_h", activations, batch, hidden);
  check(grad_c, "grad_c", activations, batch, hidden);
  if (distance_grads.has_value())
    check(*distance_grads, "distance_grads", activations, steps * batch, 2);
  if (grad_bias.has_value()) {
    check(*grad_bias, "grad_bias", activations, 1, gates);
    grad_bias->zero_();
  }
  const bool* masks = mask_pointer(step_mask, steps * batch);
  const bool bf16 = check_packed(packed_t, hidden, gates, activations);
  const int64_t chosen_isa = isa_for(isa);
  const int64_t pairs = (gates + 1) / 2;
  std::vector<uint32_t> row_pairs(bf16 ? batch * pairs : 0);
  AT_DISPATCH_FLOATING_TYPES(activations.scalar_type(), "onlstm_backward_sequence", [&] {
    scalar_t* grad_hidden = grad_h.data_ptr<scalar_t>();
    scalar_t* bias_sum = grad_bias.has_value() ? grad_bias->data_ptr<scalar_t>() : nullptr;
    in_parallel([&](const Team& team) {
      const PanelRange mine = panel_share(hidden, team.thread, team.threads);
      const int64_t rb = team.row_begin(batch), re = team.row_end(batch);
      const int64_t gb = team.row_begin(gates), ge = team.row_end(gates);  // this thread's gates
      for (int64_t t = steps - 1; t >= 0; --t) {
        scalar_t* grad_row = grad_gates.data_ptr<scalar_t>() + t * batch * gates;
        const BackwardArgs<scalar_t> args{
            activations.data_ptr<scalar_t>() + t * batch * gates,
            cumaxes.data_ptr<scalar_t>() + t * batch * 2 * n_chunk,
            tanh_cells.data_ptr<scalar_t>() + t * batch * hidden,
            cs.data_ptr<scalar_t>() + t * batch * hidden,
            grad_outputs.data_ptr<scalar_t>() + t * batch * hidden,
            step_of<scalar_t>(distance_grads, t, batch * 2), grad_hidden,
            grad_c.data_ptr<scalar_t>(), grad_row,
            masks == nullptr ? nullptr : masks + t * batch, n_chunk, chunk_size};
        if (rb < re) run_rows(args, rb, re);
        if (bf16)
          to_bf16_pairs(reinterpret_cast<const float*>(grad_row), gates, gates, rb, re,
                        row_pairs.data());
        team_barrier();
        if (bias_sum != nullptr)
          for (int64_t r = 0; r < batch; ++r) {
            const scalar_t* row = grad_row + r * gates;
            for (int64_t g = gb; g < ge; ++g) bias_sum[g] += row[g];
          }
        // at a padded step the rows' kernel has left in grad_h the part that skips the step
        const scalar_t* skip = masks == nullptr ? nullptr : grad_hidden;
        if (bf16) {
          const Product<uint32_t, uint32_t, float> m{
              row_pairs.data(), pairs, batch, pairs,
              reinterpret_cast<const uint32_t*>(packed_t.data_ptr<at::BFloat16>()), hidden,
              reinterpret_cast<float*>(grad_hidden), hidden,
              reinterpret_cast<const float*>(skip), hidden};
          product_panels_bf16(m, mine.begin, mine.end);
        } else {
          const Product<scalar_t, scalar_t, scalar_t> m{
              grad_row, gates, batch, gates, packed_t.data_ptr<scalar_t>(), hidden, grad_hidden,
              hidden, skip, hidden};
          product_panels(m, mine.begin, mine.end, chosen_isa);
        }
        team_barrier();
      }
    });
  });
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("amx", &cpu_has_amx, "whether the bf16 products can run on AMX's tiles here");
  m.def("set_amx", &set_amx, "bf16 products on AMX (True, the default, where the CPU has it) or "
        "AVX512-BF16; returns the previous setting", pybind11::arg("allowed"));
  m.doc() = "The fused elementwise work of one ON-LSTM step (treernn.kernels.onlstm).";
  m.def("forward_step", &forward_step, "One step's elementwise forward work, in place.",
        pybind11::arg("act"), pybind11::arg("product"), pybind11::arg("added"),
        pybind11::arg("cumax"), pybind11::arg("c_prev"),
        pybind11::arg("h_prev"), pybind11::arg("c_new"), pybind11::arg("h_new"),
        pybind11::arg("output"), pybind11::arg("tanh_cell"), pybind11::arg("real"),
        pybind11::arg("chunk_size"));
  m.def("backward_step", &backward_step, "One step's elementwise backward work, in place.",
        pybind11::arg("act"), pybind11::arg("cumax"), pybind11::arg("tanh_cell"),
        pybind11::arg("c_prev"), pybind11::arg("grad_output"), pybind11::arg("grad_distance"),
        pybind11::arg("grad_h"), pybind11::arg("grad_c"), pybind11::arg("grad_act"),
        pybind11::arg("real"), pybind11::arg("chunk_size"));
  m.def("forward_sequence", &forward_sequence,
        "The forward loop over all steps: packed products and elementwise work, in place.",
        pybind11::arg("input_gates"), pybind11::arg("packed"), pybind11::arg("hs"),
        pybind11::arg("cs"), pybind11::arg("outputs"), pybind11::arg("cumaxes"),
        pybind11::arg("activations"), pybind11::arg("tanh_cells"), pybind11::arg("gates_buffer"),
        pybind11::arg("step_mask"), pybind11::arg("chunk_size"), pybind11::arg("isa") = 0);
  m.def("pack_projected", &pack_projected,
        "[W_ih | scale * W_hh] packed as one weight for forward_sequence_projected.",
        pybind11::arg("input_weight"), pybind11::arg("recurrent_weight"), pybind11::arg("scale"),
        pybind11::arg("bf16") = false);
  m.def("forward_sequence_projected", &forward_sequence_projected,
        "The forward loop with the input projection inside it: one product per step over the "
        "inputs and the states, then the elementwise work, in place.",
        pybind11::arg("inputs"), pybind11::arg("bias"), pybind11::arg("packed"),
        pybind11::arg("hs"), pybind11::arg("cs"), pybind11::arg("outputs"),
        pybind11::arg("cumaxes"), pybind11::arg("activations"), pybind11::arg("tanh_cells"),
        pybind11::arg("gates_buffer"), pybind11::arg("step_mask"), pybind11::arg("chunk_size"),
        pybind11::arg("batch_first") = pybind11::none(),
        pybind11::arg("distances") = pybind11::none(), pybind11::arg("own_rows") = false,
        pybind11::arg("isa") = 0);
  m.def("infer_projected", &infer_projected,
        "Inference in one call: the weights packed, the projected forward loop on its own "
        "buffers; returns (outputs (B, T, H), h_last, c_last, distances (T, B, 2)).",
        pybind11::arg("inputs"), pybind11::arg("input_weight"),
        pybind11::arg("recurrent_weight"), pybind11::arg("scale"), pybind11::arg("bias"),
        pybind11::arg("recurrent_bias"), pybind11::arg("h0"), pybind11::arg("c0"),
        pybind11::arg("step_mask"),
        pybind11::arg("chunk_size"), pybind11::arg("own_rows") = false,
        pybind11::arg("isa") = 0, pybind11::arg("bf16") = false);
  m.def("backward_sequence", &backward_sequence,
        "The reverse loop over all steps: elementwise work and packed products, in place.",
        pybind11::arg("packed_t"), pybind11::arg("activations"), pybind11::arg("cumaxes"),
        pybind11::arg("tanh_cells"), pybind11::arg("cs"), pybind11::arg("grad_outputs"),
        pybind11::arg("distance_grads"), pybind11::arg("grad_h"), pybind11::arg("grad_c"),
        pybind11::arg("grad_gates"), pybind11::arg("step_mask"), pybind11::arg("chunk_size"),
        pybind11::arg("grad_bias") = pybind11::none(), pybind11::arg("isa") = 0);
}
