// Little-endian fields of ggml blocks: the loads and stores the dequantisers and quantisers share
// (model/quants.cpp, model/quants_iq.cpp).
#pragma once

#include <cstdint>

namespace tllm {

inline uint16_t load_u16(const uint8_t* p) { return uint16_t(p[0] | p[1] << 8); }

inline uint32_t load_u32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

inline void store_u16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v & 0xff);
  p[1] = uint8_t(v >> 8);
}

inline void store_u32(uint8_t* p, uint32_t v) {
  for (int k = 0; k < 4; ++k) p[k] = uint8_t(v >> (8 * k));
}

}  // namespace tllm
