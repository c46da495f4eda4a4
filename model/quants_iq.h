// Quantisers for ggml's codebook formats IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S
// (used by quantize_row; the layouts are spelled out next to their dequantisers in quants.cpp).
#pragma once

#include <cstdint>

#include "model/gguf.h"

namespace tllm::iq {

// True for the seven codebook formats above.
bool is_codebook_type(GgmlType t);

// Quantises one 256-value super-block `x` of codebook type `t` into `b` (the type's block size).
void quantize_block(GgmlType t, const float* x, uint8_t* b);

}  // namespace tllm::iq
