// ggml block formats: dequantisation to fp32, quantisation (for writing models and tests), and
// requantisation of GGUF tensors into the two weight types the backends compute with (W8, FP16).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "backend/backend.h"
#include "model/gguf.h"

namespace tllm {

// Dequantises `n` values of type `t` (n a multiple of the type's block size) from `src` to `dst`.
// Supports F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL,
// IQ4_XS, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, TQ1_0, TQ2_0. Throws GgufError for
// any other type.
void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);

// True when dequantize_row handles `t`.
bool can_dequantize(GgmlType t);

// Q4_0, Q5_0, Q8_0 and IQ4_NL blocks are 32 integer codes times one fp16 scale d. For a block of one
// of those types, writes its codes to q (32) and its d to *d, so that value j is exactly q[j]·d,
// and returns true; returns false (writing nothing) for any other type. The codes: Q4_0 -8..7,
// Q5_0 -16..15, Q8_0 -128..127, IQ4_NL the table's -127..113.
bool block_codes(GgmlType t, const uint8_t* block, int* q, half_t* d);

// Quantises `n` fp32 values into type `t`. Supports F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (round-to-nearest with scales derived from each block's range),
// IQ4_NL, IQ4_XS (ggml's reference algorithm without importance weights: a small search for the
// scale of least weighted squared error, codes nearest in the non-linear table), the codebook
// i-quants IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S (a search for each sub-block's
// scale of least squared error, codebook entries near the scaled values: model/quants_iq.cpp),
// TQ1_0, TQ2_0. Throws GgufError for any other type.
void quantize_row(GgmlType t, const float* src, void* dst, int64_t n);

// True when quantize_row handles `t`.
bool can_quantize(GgmlType t);

// Runs fn(i) for every i in [0, n), shared out among the host's threads (one per core); returns when
// all are done and rethrows the first exception any call threw. Calls must be independent.
void parallel_for(int64_t n, const std::function<void(int64_t i)>& fn);

// Requantises a 2-D GGUF tensor (dims = {k, n}) to W8: each group of kW8Group values along a row
// gets scale = max|w| / 127 (rounded to fp16) and q = round(w / scale), except a group that is one
// block of codes (block_codes) that fit ±127: it keeps them, q = ±code and scale = |d|, exactly.
// Throws GgufError when the tensor is not 2-D, k is not a multiple of kW8Group, or the type cannot
// be dequantised.
HostWeights requantize_w8(const TensorInfo& t);
// Converts a 2-D GGUF tensor to FP16 (used for lm_head and the embedding table it shares). From
// Q8_0 the result also carries the blocks' int8 values and fp16 scales, the int8 form of the fp16
// values (HostMatrix), which a backend may keep instead: the same lm_head in about half the bytes.
HostWeights convert_f16(const TensorInfo& t);
// The lm_head (output.weight, or the token embedding it is tied to) as the backends take it: FP16
// with an int8 form wherever the file's type is quantised, so that a decode step streams about
// half the bytes. From F32, F16 and BF16 the fp16 values alone (convert_f16); from Q8_0 the blocks
// themselves (convert_f16, exact); from any other quantised type (Q6_K in most Q4_K_M files) the
// W8 requantisation the layer matrices get (requantize_w8: at most max|w|/254 of error per value of
// a group, and none for blocks of codes), widened to fp16(q · scale).
HostWeights convert_lm_head(const TensorInfo& t);
// Whether convert_lm_head gives a tensor of this type an int8 form: every type but F32, F16, BF16.
bool lm_head_has_int8_form(GgmlType type);
// Dequantises a whole tensor of any supported type (norm weights, biases) to fp32.
std::vector<float> dequantize_tensor(const TensorInfo& t);

}  // namespace tllm
