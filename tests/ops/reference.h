// The conformance suite's reference: every op in plain loops with fp64 arithmetic, meant to be
// checked by eye against the definitions in backend/backend.h. No tiling, no threads, no tricks.
//
// Inputs are the values the backend sees (fp16 inputs already widened to float); outputs are the
// exact-as-fp64 results before any rounding to the output type, so a test can state how far a
// backend's fp32 arithmetic and fp16 rounding may take it from them.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace tllm::ref {

// w[n][k] as floats: q * scale (exact in fp32) for W8, the fp16 value for F16.
std::vector<float> dequantize(const HostMatrix& w);

// y (m, n) = x (m, k) · wᵀ (+ bias (n)). When mag is given it receives Σ_k |x·w| per output: the
// scale against which a backend's fp32 accumulation error is measured.
std::vector<double> matmul(const std::vector<float>& w, int64_t n, int64_t k, const std::vector<float>& x,
                           int64_t m, const std::vector<float>* bias, std::vector<double>* mag = nullptr);

// x / sqrt(mean(x²) + eps) * weight, row by row, for m rows of n.
std::vector<double> rmsnorm(const std::vector<float>& x, const std::vector<float>& weight, int64_t m,
                            int64_t n, float eps);

// Rope on m rows of n_heads heads: pair j of a head turns by pos · theta^(-2j/head_dim), divided by
// factors[j] when factors are given (head_dim/2 of them); pairs are (2j, 2j+1) for Normal and
// (j, j + head_dim/2) for Neox.
std::vector<double> rope(const std::vector<float>& x, const std::vector<int32_t>& pos, int n_heads,
                         int head_dim, float theta, RopeMode mode, const std::vector<float>& factors = {});

// Writes rows of k and v (m, n_head_kv, head_dim) as fp16 into the (n_head_kv, n_ctx, head_dim)
// caches at rows pos.
void kv_append(const std::vector<float>& k, const std::vector<float>& v, const std::vector<int32_t>& pos,
               int n_head_kv, int head_dim, int n_ctx, std::vector<half_t>& k_cache,
               std::vector<half_t>& v_cache);

// Causal attention of m query rows (row i at q[i * q_row_stride], n_head·head_dim values) against
// cache rows 0 .. pos0 + i; query head h reads KV head h / (n_head / n_head_kv). Softmax with the
// maximum subtracted. Returns (m, n_head, head_dim). Decode is m = 1, pos0 = n_kv - 1.
// When score_mag is given it receives, per (row, head), max_j scale·Σ_d |q_d·k_jd|: the scale of a
// backend's fp32 error in the scores.
std::vector<double> attention(const std::vector<float>& q, int64_t q_row_stride,
                              const std::vector<half_t>& k_cache, const std::vector<half_t>& v_cache,
                              int64_t m, int pos0, int n_head, int n_head_kv, int head_dim, int n_ctx,
                              float scale, std::vector<double>* score_mag = nullptr);

double silu(double g);  // g / (1 + exp(-g))

// silu(gate) * up, elementwise.
std::vector<double> silu_mul(const std::vector<double>& gate, const std::vector<double>& up);

// Index of the largest value, the first one on ties.
int64_t argmax(const std::vector<float>& x);

}  // namespace tllm::ref
