// Requantisation of GGUF weight tensors into the backends' weight types.
//
// A 2-D GGUF weight has dims = {k, n}: n rows (output features) of k values (input features), each
// row a whole number of blocks. Rows are dequantised to fp32 one at a time and re-encoded:
//   W8:  per group of kW8Group values along k, scale = fp16(max|w| / 127) and
//        q = clamp(round(w / scale), -127, 127) with the stored (rounded) scale; an all-zero group
//        gets scale 0 and q 0. Error per value: |w - q·scale| <= scale/2, plus at most
//        max|w|·2^-11 on the largest values when rounding the scale to fp16 made it smaller.
//        A group that is one source block of integer codes times one fp16 scale d (Q4_0, Q5_0,
//        Q8_0, IQ4_NL: block_codes) keeps them instead, q = code and scale = d (both negated when
//        d < 0), with no error at all, unless a code does not fit ±127 (Q8_0's -128).
//   F16: w rounded to fp16; from Q8_0 blocks also the blocks' int8 values and scales (the int8
//        form of HostMatrix: each fp16 value is fp16(q · d)).
//   lm_head: F16 from float types, F16 with the blocks as int8 form from Q8_0, and from any other
//        quantised type the W8 rounding above widened to fp16(q · scale), int8 form kept.
// Rows are independent, so they are spread over the host's threads.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "model/quants.h"

namespace tllm {

namespace {

// Runs fn(begin, end) over [0, n) in slices of kRowsPerTask rows, in parallel.
void for_row_ranges(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  constexpr int64_t kRowsPerTask = 64;
  parallel_for((n + kRowsPerTask - 1) / kRowsPerTask, [&](int64_t task) {
    fn(task * kRowsPerTask, std::min(n, (task + 1) * kRowsPerTask));
  });
}

struct MatrixShape {
  int64_t n = 0;             // rows
  int64_t k = 0;             // values per row
  size_t row_bytes = 0;      // encoded bytes per row
  int64_t block_values = 0;  // values per block of the tensor's type
  int64_t block_bytes = 0;   // bytes per block
};

// Checks that the tensor's type can be dequantised and that its bytes are all there.
void check_readable(const TensorInfo& t) {
  const std::string tn = "tensor '" + t.name + "'";
  if (!can_dequantize(t.type)) {
    throw GgufError(tn + ": type " + ggml_type_name(t.type) + " cannot be dequantised");
  }
  int64_t bv = 0, bb = 0;
  ggml_type_block(t.type, &bv, &bb);
  if (!t.data || t.bytes < size_t(t.n_elements() / bv * bb)) {
    throw GgufError(tn + ": data missing or shorter than its shape");
  }
}

MatrixShape matrix_shape(const TensorInfo& t, const char* what) {
  if (t.dims.size() != 2) {
    throw GgufError("tensor '" + t.name + "': " + what + " needs a 2-D tensor, it has " +
                    std::to_string(t.dims.size()) + " dimensions");
  }
  check_readable(t);
  MatrixShape s;
  ggml_type_block(t.type, &s.block_values, &s.block_bytes);
  s.k = t.dims[0];
  s.n = t.dims[1];
  s.row_bytes = size_t(s.k / s.block_values * s.block_bytes);
  return s;
}

// Takes over a source block of integer codes times one fp16 scale d (block_codes) as its W8 group:
// q = code and scale = d, both negated when d < 0 so that the scale is >= 0 as the rounding rule
// makes it; every q · scale is then the block's value exactly (a d of ±0 gives scale 0, q 0).
// False, with nothing written, when the type's blocks are not codes, a code does not fit ±127 (Q8_0's
// -128), or d is not finite (the rounding rule then reports the row).
bool take_over_codes(GgmlType type, const uint8_t* block, int8_t* q, half_t* scale) {
  static_assert(kW8Group == 32, "a block of codes (32 values) is one W8 group");
  int codes[kW8Group];
  half_t d = 0;
  if (!block_codes(type, block, codes, &d) || !std::isfinite(half_to_float(d))) return false;
  const int sign = (d & 0x8000) ? -1 : 1;
  for (int j = 0; j < kW8Group; ++j) {
    if (std::abs(codes[j]) > 127) return false;
  }
  *scale = half_t(d & 0x7fff);
  for (int j = 0; j < kW8Group; ++j) q[j] = *scale == 0 ? 0 : int8_t(sign * codes[j]);
  return true;
}

}  // namespace

HostWeights requantize_w8(const TensorInfo& t) {
  const MatrixShape s = matrix_shape(t, "W8 requantisation");
  if (s.k % kW8Group != 0) {
    throw GgufError("tensor '" + t.name + "': row length " + std::to_string(s.k) +
                    " is not a multiple of the W8 group size " + std::to_string(kW8Group));
  }
  HostWeights w;
  w.type = WeightType::W8;
  w.n = s.n;
  w.k = s.k;
  w.q.resize(size_t(s.n * s.k));           // (n, k)
  w.scales.resize(size_t(s.n * s.k / kW8Group));  // (n, k / kW8Group)
  const bool blocks_are_groups = s.block_values == kW8Group;
  for_row_ranges(s.n, [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(s.k));  // (k)
    for (int64_t r = begin; r < end; ++r) {
      const uint8_t* src = t.data + size_t(r) * s.row_bytes;
      // Where blocks are groups, each block is read on its own: taken over when it is codes, else
      // dequantised alone; other types are dequantised a row at a time.
      if (!blocks_are_groups) dequantize_row(t.type, src, row.data(), s.k);
      for (int64_t g = 0; g < s.k / kW8Group; ++g) {
        half_t* scale_out = &w.scales[size_t(r * (s.k / kW8Group) + g)];
        int8_t* q = w.q.data() + r * s.k + g * kW8Group;
        float* x = row.data() + g * kW8Group;
        if (blocks_are_groups) {
          const uint8_t* block = src + g * s.block_bytes;
          if (take_over_codes(t.type, block, q, scale_out)) continue;
          dequantize_row(t.type, block, x, kW8Group);
        }
        float amax = 0;
        bool finite = true;
        for (int j = 0; j < kW8Group; ++j) {
          amax = std::max(amax, std::fabs(x[j]));
          finite = finite && std::isfinite(x[j]);
        }
        const half_t sh = float_to_half(amax / 127.0f);
        const float scale = half_to_float(sh);
        if (!finite || !std::isfinite(scale)) {
          throw GgufError("tensor '" + t.name + "': row " + std::to_string(r) +
                          " holds values that are not finite or too large for an fp16 scale");
        }
        *scale_out = sh;
        for (int j = 0; j < kW8Group; ++j) {
          q[j] = scale == 0 ? 0 : int8_t(std::clamp(std::lround(x[j] / scale), -127L, 127L));
        }
      }
    }
  });
  return w;
}

HostWeights convert_f16(const TensorInfo& t) {
  const MatrixShape s = matrix_shape(t, "FP16 conversion");
  HostWeights w;
  w.type = WeightType::F16;
  w.n = s.n;
  w.k = s.k;
  w.f16.resize(size_t(s.n * s.k));  // (n, k)
  // A Q8_0 block (fp16 d, then 32 int8 q) is one W8 group: its values are q · d, exact in fp32, so
  // each fp16 value below is fp16(q · d), and (q, d) is the matrix's int8 form (HostMatrix).
  const bool int8_form = t.type == GgmlType::Q8_0;
  static_assert(kW8Group == 32, "a Q8_0 block is one W8 group");
  if (int8_form) {
    w.q.resize(size_t(s.n * s.k));                  // (n, k)
    w.scales.resize(size_t(s.n * s.k / kW8Group));  // (n, k / kW8Group)
  }
  for_row_ranges(s.n, [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(s.k));  // (k)
    for (int64_t r = begin; r < end; ++r) {
      const uint8_t* src = t.data + size_t(r) * s.row_bytes;
      dequantize_row(t.type, src, row.data(), s.k);
      half_t* out = w.f16.data() + r * s.k;
      for (int64_t j = 0; j < s.k; ++j) out[j] = float_to_half(row[size_t(j)]);
      if (!int8_form) continue;
      for (int64_t g = 0; g < s.k / kW8Group; ++g) {
        const uint8_t* block = src + g * (2 + kW8Group);
        std::memcpy(&w.scales[size_t(r * (s.k / kW8Group) + g)], block, sizeof(half_t));
        std::memcpy(&w.q[size_t(r * s.k + g * kW8Group)], block + 2, kW8Group);
      }
    }
  });
  return w;
}

bool lm_head_has_int8_form(GgmlType type) {
  return type != GgmlType::F32 && type != GgmlType::F16 && type != GgmlType::BF16;
}

HostWeights convert_lm_head(const TensorInfo& t) {
  if (!lm_head_has_int8_form(t.type) || t.type == GgmlType::Q8_0) return convert_f16(t);
  HostWeights w = requantize_w8(t);
  w.widen_to_f16();
  return w;
}

std::vector<float> dequantize_tensor(const TensorInfo& t) {
  check_readable(t);
  std::vector<float> out(static_cast<size_t>(t.n_elements()));
  dequantize_row(t.type, t.data, out.data(), t.n_elements());
  return out;
}

}  // namespace tllm
