// IEEE-754 binary16 <-> binary32 conversion on the host.
//
// Activations that feed a matmul, the KV cache and FP16 weights are stored as raw 16-bit patterns
// (`half_t`) so that host code never needs CUDA headers. Conversion rounds to nearest-even, handles
// subnormals, infinities and NaN, and is exact for every value that fits.
#pragma once

#include <cstdint>
#include <cstring>

namespace tllm {

using half_t = uint16_t;  // raw IEEE-754 binary16 bits

inline float half_to_float(half_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | uint32_t(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline half_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // inf or NaN
    return half_t(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u));
  }
  if (absx >= 0x477ff000u) return half_t(sign | 0x7c00u);  // rounds to >= 65520: overflow to inf
  if (absx < 0x38800000u) {                                  // result is subnormal or zero
    if (absx < 0x33000000u) return half_t(sign);             // below half the smallest subnormal
    const uint32_t e = absx >> 23;
    const uint32_t m = (absx & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14..24
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (r & 1u))) ++r;
    return half_t(sign | r);
  }
  uint32_t r = ((absx >> 13) - (112u << 10));
  const uint32_t rem = absx & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return half_t(sign | r);
}

// Rounds a float through binary16 and back: what storing it in an fp16 buffer does to it.
inline float round_to_half(float f) { return half_to_float(float_to_half(f)); }

}  // namespace tllm
