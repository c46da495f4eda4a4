// ggml block formats: dequantisation of every format this project reads and quantisers for the
// formats it writes (round-to-nearest, and for IQ4_NL / IQ4_XS ggml's scale search).
//
// Block layouts (little-endian, fp16 scales; "d" is the scale, "m"/"dmin" the min):
//   Q4_0  32 values, 18 B: d | qs[16]           x = (nibble - 8) * d
//   Q4_1  32 values, 20 B: d m | qs[16]         x = nibble * d + m
//   Q5_0  32 values, 22 B: d | qh[4] | qs[16]   x = (nibble | high bit << 4) - 16) * d
//   Q5_1  32 values, 24 B: d m | qh[4] | qs[16] x = (nibble | high bit << 4) * d + m
//   Q8_0  32 values, 34 B: d | int8 qs[32]      x = q * d
//   IQ4_NL 32 values, 18 B: d | qs[16]          x = kvalues_iq4nl[nibble] * d
//   In the 32-value formats byte j of qs holds value j (low nibble) and value j + 16 (high nibble);
//   bit j of the little-endian u32 qh is the fifth bit of value j.
//   Q2_K 256 values,  84 B: scales[16] | qs[64] | d dmin
//   Q3_K 256 values, 110 B: hmask[32] | qs[64] | scales[12] | d
//   Q4_K 256 values, 144 B: d dmin | scales[12] | qs[128]
//   Q5_K 256 values, 176 B: d dmin | scales[12] | qh[32] | qs[128]
//   Q6_K 256 values, 210 B: ql[128] | qh[64] | int8 scales[16] | d
//   IQ4_XS 256 values, 136 B: d | u16 scales_h | scales_l[4] | qs[128]
//   IQ2_XXS 256 values, 66 B: d | qs[64]
//   IQ2_XS 256 values,  74 B: d | u16 qs[32] | scales[8]
//   IQ2_S  256 values,  82 B: d | qs[32] | signs[32] | qh[8] | scales[8]
//   IQ3_XXS 256 values, 98 B: d | qs[64] | u32 scales_signs[8]
//   IQ3_S  256 values, 110 B: d | qs[64] | qh[8] | signs[32] | scales[4]
//   IQ1_S  256 values,  50 B: d | qs[32] | u16 qh[8]
//   IQ1_M  256 values,  56 B: qs[32] | qh[16] | u16 scales[4] (d spread over their top nibbles)
//   TQ1_0  256 values,  54 B: qs[48] | qh[4] | d   5 (qh: 4) trits per byte, x = (trit - 1) * d
//   TQ2_0  256 values,  66 B: qs[64] | d           x = (2-bit q - 1) * d
//   The i-quants (IQ1..IQ3) pick groups of 8 or 4 values from a codebook (model/iq_grids.h).
//   The super-block layouts are spelled out next to each dequantiser.
#include "model/quants.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <exception>
#include <string>
#include <thread>

#include "model/block_bytes.h"
#include "model/iq_grids.h"
#include "model/quants_iq.h"

namespace tllm {

namespace {

float load_half(const uint8_t* p) { return half_to_float(half_t(load_u16(p))); }

void store_half(uint8_t* p, half_t h) { store_u16(p, h); }

// The smallest fp16 value >= v (v >= 0): a scale chosen this way never makes a quantised value
// overflow its range because of the scale's own rounding.
half_t half_at_least(float v) {
  half_t h = float_to_half(v);
  if (half_to_float(h) < v) ++h;  // positive finite: the next bit pattern is the next value up
  return h;
}

int nearest(float v) { return int(std::lround(v)); }

int clamp_int(int v, int lo, int hi) { return std::min(hi, std::max(lo, v)); }

// ---- 32-value formats ----------------------------------------------------------------------------

// IQ4_NL's non-linear table (also IQ4_XS's): a 4-bit index selects one of these 16 codes.
constexpr int kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// The 32 nibbles of a 16-byte qs: byte j holds value j (low nibble) and value j + 16 (high nibble).
void unpack_nibbles(const uint8_t* qs, int* q) {
  for (int j = 0; j < 16; ++j) {
    q[j] = qs[j] & 0x0f;
    q[j + 16] = qs[j] >> 4;
  }
}

// Five-bit values of a Q5_0/Q5_1 block: low nibbles from qs, fifth bits from qh.
void unpack_5bit(const uint8_t* qh_bytes, const uint8_t* qs, int* q) {
  const uint32_t qh = load_u32(qh_bytes);
  unpack_nibbles(qs, q);
  for (int j = 0; j < 32; ++j) q[j] |= int((qh >> j) & 1) << 4;
}

// Q4_0, Q5_0, Q8_0 and IQ4_NL blocks are 32 integer codes times the block's one scale d (its first
// two bytes): x = code · d. Each codes_* function writes the 32 codes of a block.
void codes_q4_0(const uint8_t* b, int* q) {
  unpack_nibbles(b + 2, q);
  for (int j = 0; j < 32; ++j) q[j] -= 8;
}

void codes_q5_0(const uint8_t* b, int* q) {
  unpack_5bit(b + 2, b + 6, q);
  for (int j = 0; j < 32; ++j) q[j] -= 16;
}

void codes_q8_0(const uint8_t* b, int* q) {
  const int8_t* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < 32; ++j) q[j] = qs[j];
}

void codes_iq4_nl(const uint8_t* b, int* q) {
  unpack_nibbles(b + 2, q);
  for (int j = 0; j < 32; ++j) q[j] = kIq4nlValues[q[j]];
}

using CodesFn = void (*)(const uint8_t* block, int* q);

// The codes_* function of `t`; null for a type whose blocks are not codes times one scale.
CodesFn codes_of(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: return codes_q4_0;
    case GgmlType::Q5_0: return codes_q5_0;
    case GgmlType::Q8_0: return codes_q8_0;
    case GgmlType::IQ4_NL: return codes_iq4_nl;
    default: return nullptr;
  }
}

void dequant_codes(CodesFn codes, const uint8_t* b, float* y) {
  const float d = load_half(b);
  int q[32];
  codes(b, q);
  for (int j = 0; j < 32; ++j) y[j] = float(q[j]) * d;
}

void dequant_q4_1(const uint8_t* b, float* y) {
  const float d = load_half(b), m = load_half(b + 2);
  int q[32];
  unpack_nibbles(b + 4, q);
  for (int j = 0; j < 32; ++j) y[j] = float(q[j]) * d + m;
}

void dequant_q5_1(const uint8_t* b, float* y) {
  const float d = load_half(b), m = load_half(b + 2);
  int q[32];
  unpack_5bit(b + 4, b + 8, q);
  for (int j = 0; j < 32; ++j) y[j] = float(q[j]) * d + m;
}

// ---- K-quants (256-value super-blocks) -----------------------------------------------------------

// Q2_K: 16 sub-blocks of 16 values; scales[i] = 4-bit scale (low) | 4-bit min (high) of sub-block i.
// Value v = 128·h + 32·j + l (h < 2, j < 4, l < 32) is bits 2j..2j+1 of qs[32·h + l] and belongs
// to sub-block 8·h + 2·j + l/16: x = d·scale·q - dmin·min.
void dequant_q2_k(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* qs = b + 16;
  const float d = load_half(b + 80), dmin = load_half(b + 82);
  for (int h = 0; h < 2; ++h) {
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t sc = scales[8 * h + 2 * j + l / 16];
        const int q = (qs[32 * h + l] >> (2 * j)) & 3;
        y[128 * h + 32 * j + l] = d * float(sc & 0x0f) * float(q) - dmin * float(sc >> 4);
      }
    }
  }
}

// Q3_K: 16 sub-blocks of 16 values with 6-bit scales (stored +32) packed in 12 bytes: the low four
// bits of scale i are the low (i < 8) or high (i >= 8) nibble of byte i % 8; its top two bits are
// bits 2·(i/4)..2·(i/4)+1 of byte 8 + i % 4.
// Value v = 128·h + 32·j + l takes its low two bits from bits 2j..2j+1 of qs[32·h + l] and its
// third bit from bit 4·h + j of hmask[l]; q = low2 - (third bit ? 0 : 4), in -4..3;
// x = d·(scale - 32)·q with the scale of sub-block 8·h + 2·j + l/16.
int q3_k_scale(const uint8_t* s, int i) {
  const int low = i < 8 ? s[i] & 0x0f : s[i - 8] >> 4;
  const int high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
  return (low | high << 4) - 32;
}

void dequant_q3_k(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const uint8_t* scales = b + 96;
  const float d = load_half(b + 108);
  int sc[16];
  for (int i = 0; i < 16; ++i) sc[i] = q3_k_scale(scales, i);
  for (int h = 0; h < 2; ++h) {
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 32; ++l) {
        const int low = (qs[32 * h + l] >> (2 * j)) & 3;
        const int high = (hmask[l] >> (4 * h + j)) & 1;
        const int q = low - (high ? 0 : 4);
        y[128 * h + 32 * j + l] = d * float(sc[8 * h + 2 * j + l / 16]) * float(q);
      }
    }
  }
}

// Q4_K / Q5_K: 8 sub-blocks of 32 values, each with a 6-bit scale and a 6-bit min packed in 12
// bytes: for i < 4, scale = s[i] & 63 and min = s[i + 4] & 63; for i >= 4, scale = low nibble of
// s[i + 4] | (s[i - 4] >> 6) << 4 and min = high nibble of s[i + 4] | (s[i] >> 6) << 4.
void k4_scale_min(const uint8_t* s, int i, int* scale, int* min) {
  if (i < 4) {
    *scale = s[i] & 63;
    *min = s[i + 4] & 63;
  } else {
    *scale = (s[i + 4] & 0x0f) | (s[i - 4] >> 6) << 4;
    *min = (s[i + 4] >> 4) | (s[i] >> 6) << 4;
  }
}

// Q4_K: value v = 64·g + 32·u + l (g < 4, u < 2, l < 32) is the low (u = 0) or high (u = 1) nibble
// of qs[32·g + l] and belongs to sub-block 2·g + u: x = d·scale·q - dmin·min.
void dequant_q4_k(const uint8_t* b, float* y) {
  const float d = load_half(b), dmin = load_half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qs = b + 16;
  for (int g = 0; g < 4; ++g) {
    for (int u = 0; u < 2; ++u) {
      int sc, mn;
      k4_scale_min(scales, 2 * g + u, &sc, &mn);
      const float dl = d * float(sc), ml = dmin * float(mn);
      for (int l = 0; l < 32; ++l) {
        const int q = u ? qs[32 * g + l] >> 4 : qs[32 * g + l] & 0x0f;
        y[64 * g + 32 * u + l] = dl * float(q) - ml;
      }
    }
  }
}

// Q5_K: as Q4_K, with the fifth bit of value 64·g + 32·u + l in bit 2·g + u of qh[l].
void dequant_q5_k(const uint8_t* b, float* y) {
  const float d = load_half(b), dmin = load_half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int g = 0; g < 4; ++g) {
    for (int u = 0; u < 2; ++u) {
      const int sub = 2 * g + u;
      int sc, mn;
      k4_scale_min(scales, sub, &sc, &mn);
      const float dl = d * float(sc), ml = dmin * float(mn);
      for (int l = 0; l < 32; ++l) {
        const int nibble = u ? qs[32 * g + l] >> 4 : qs[32 * g + l] & 0x0f;
        const int q = nibble | ((qh[l] >> sub) & 1) << 4;
        y[64 * g + 32 * u + l] = dl * float(q) - ml;
      }
    }
  }
}

// Q6_K: 16 sub-blocks of 16 values with int8 scales. Value v = 128·h + 32·k + l (h < 2, k < 4,
// l < 32) has its low four bits in ql[64·h + 32·(k % 2) + l] (low nibble for k < 2, high for
// k >= 2) and its top two bits in bits 2k..2k+1 of qh[32·h + l]; q = that 6-bit value - 32;
// x = d·scales[8·h + 2·k + l/16]·q.
void dequant_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = load_half(b + 208);
  for (int h = 0; h < 2; ++h) {
    for (int k = 0; k < 4; ++k) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t lo_byte = ql[64 * h + 32 * (k % 2) + l];
        const int lo = k < 2 ? lo_byte & 0x0f : lo_byte >> 4;
        const int hi = (qh[32 * h + l] >> (2 * k)) & 3;
        const int q = (lo | hi << 4) - 32;
        y[128 * h + 32 * k + l] = d * float(scales[8 * h + 2 * k + l / 16]) * float(q);
      }
    }
  }
}

// IQ4_XS: 8 sub-blocks of 32 values, each with a 6-bit scale ls: its low four bits are the low (even
// i) or high (odd i) nibble of scales_l[i / 2], its top two bits are bits 2i..2i+1 of the
// little-endian u16 scales_h. Sub-block i's values are packed as an IQ4_NL block's in qs[16·i ..
// 16·i + 15]: x = d·(ls - 32)·kvalues_iq4nl[nibble]. (d·(ls - 32) has at most 17 significant bits and
// a table code at most 7, so every product is exact in fp32 whatever the order of multiplication.)
void dequant_iq4_xs(const uint8_t* b, float* y) {
  const float d = load_half(b);
  const int scales_h = b[2] | b[3] << 8;
  const uint8_t* scales_l = b + 4;
  const uint8_t* qs = b + 8;
  for (int i = 0; i < 8; ++i) {
    const int ls = ((scales_l[i / 2] >> (4 * (i % 2))) & 0x0f) | ((scales_h >> (2 * i)) & 3) << 4;
    const float dl = d * float(ls - 32);
    int q[32];
    unpack_nibbles(qs + 16 * i, q);
    for (int j = 0; j < 32; ++j) y[32 * i + j] = dl * float(kIq4nlValues[q[j]]);
  }
}

// ---- i-quants (256-value super-blocks, codebook grids) -------------------------------------------

// IQ2_XXS, IQ2_XS and IQ3_XXS store the signs of 8 values as a 7-bit index: bit j (j < 7) is the
// sign of value j, and the eighth sign makes the number of negative values even.
uint8_t signs_of(uint32_t index7) {
  int parity = 0;
  for (int j = 0; j < 7; ++j) parity ^= (index7 >> j) & 1;
  return uint8_t(index7 | parity << 7);
}

// y[j] = db·grid[j], negated where bit j of `signs` is set (j < n).
void put_signed(const uint8_t* grid, int n, unsigned signs, float db, float* y) {
  for (int j = 0; j < n; ++j) y[j] = db * float(grid[j]) * ((signs >> j) & 1 ? -1.0f : 1.0f);
}

// The 4-bit scale s of an IQ2 sub-block becomes d·(0.5 + s)·0.25.
float iq2_scale(float d, int s) { return d * (0.5f + float(s)) * 0.25f; }

// IQ2_XXS: 8 sub-blocks of 32 values, 8 bytes each: four grid indices (bytes 0..3, one per group of
// 8 values) and a u32 whose bits 7g..7g+6 are the sign index of group g and bits 28..31 the scale.
void dequant_iq2_xxs(const uint8_t* b, float* y) {
  const float d = load_half(b);
  for (int ib = 0; ib < 8; ++ib) {
    const uint8_t* q = b + 2 + 8 * ib;
    const uint32_t aux = load_u32(q + 4);
    const float db = iq2_scale(d, int(aux >> 28));
    for (int g = 0; g < 4; ++g) {
      const uint8_t s = signs_of((aux >> (7 * g)) & 127);
      put_signed(iq::kIq2xxsGrid[q[g]], 8, s, db, y + 32 * ib + 8 * g);
    }
  }
}

// IQ2_XS: group g (32 groups of 8 values) is the u16 qs[g]: grid index in bits 0..8, sign index in
// bits 9..15. Scale k (16 of them, 4 bits: low then high nibble of scales[k / 2]) covers groups
// 2k and 2k + 1.
void dequant_iq2_xs(const uint8_t* b, float* y) {
  const float d = load_half(b);
  const uint8_t* scales = b + 66;
  for (int g = 0; g < 32; ++g) {
    const uint16_t q = load_u16(b + 2 + 2 * g);
    const float db = iq2_scale(d, (scales[g / 4] >> (4 * ((g / 2) % 2))) & 15);
    put_signed(iq::kIq2xsGrid[q & 511], 8, signs_of(q >> 9), db, y + 8 * g);
  }
}

// IQ2_S: group g (32 groups of 8 values) has grid index qs[g] | (bits 2(g%4)..2(g%4)+1 of
// qh[g / 4]) << 8 and its 8 signs in signs[g]; scales as IQ2_XS.
void dequant_iq2_s(const uint8_t* b, float* y) {
  const float d = load_half(b);
  const uint8_t* qs = b + 2;
  const uint8_t* signs = b + 34;
  const uint8_t* qh = b + 66;
  const uint8_t* scales = b + 74;
  for (int g = 0; g < 32; ++g) {
    const int index = qs[g] | ((qh[g / 4] >> (2 * (g % 4))) & 3) << 8;
    const float db = iq2_scale(d, (scales[g / 4] >> (4 * ((g / 2) % 2))) & 15);
    put_signed(iq::kIq2sGrid[index], 8, signs[g], db, y + 8 * g);
  }
}

// IQ3_XXS: 8 sub-blocks of 32 values; sub-block ib takes 8 grid indices (4 values each) from
// qs[8ib..8ib + 7] and the u32 scales_signs[ib]: sign index of group g (8 values) in bits
// 7g..7g+6, scale s in bits 28..31, x = d·(0.5 + s)·0.5·grid·sign.
void dequant_iq3_xxs(const uint8_t* b, float* y) {
  const float d = load_half(b);
  for (int ib = 0; ib < 8; ++ib) {
    const uint8_t* q = b + 2 + 8 * ib;
    const uint32_t aux = load_u32(b + 66 + 4 * ib);
    const float db = d * (0.5f + float(aux >> 28)) * 0.5f;
    for (int g = 0; g < 4; ++g) {
      const unsigned s = signs_of((aux >> (7 * g)) & 127);
      float* out = y + 32 * ib + 8 * g;
      put_signed(iq::kIq3xxsGrid[q[2 * g]], 4, s, db, out);
      put_signed(iq::kIq3xxsGrid[q[2 * g + 1]], 4, s >> 4, db, out + 4);
    }
  }
}

// IQ3_S: values 4k..4k + 3 (k < 64) are grid entry qs[k] | (bit k % 8 of qh[k / 8]) << 8; the sign
// of value v is bit v % 8 of signs[v / 8]. Sub-block ib (32 values) has the 4-bit scale s in the
// low (even ib) or high (odd ib) nibble of scales[ib / 2]: x = d·(1 + 2s)·grid·sign. Byte offsets:
// qs 2, qh 66, signs 74, scales 106.
void dequant_iq3_s(const uint8_t* b, float* y) {
  const float d = load_half(b);
  for (int ib = 0; ib < 8; ++ib) {
    const float db = d * float(1 + 2 * ((b[106 + ib / 2] >> (4 * (ib % 2))) & 15));
    const int high = b[66 + ib];  // qh: bit k % 8 is the ninth index bit of entry k = 8ib + k % 8
    for (int k = 8 * ib; k < 8 * ib + 8; ++k) {
      const int index = b[2 + k] | ((high >> (k % 8)) & 1) << 8;
      put_signed(iq::kIq3sGrid[index], 4, b[74 + k / 2] >> (4 * (k % 2)), db, y + 4 * k);
    }
  }
}

// IQ1_S / IQ1_M: y[j] = dl·(grid[j] + delta), j < 8, with grid values -1, 0, 1.
void put_iq1(const int8_t* grid, float dl, float delta, float* y) {
  for (int j = 0; j < 8; ++j) y[j] = dl * (float(grid[j]) + delta);
}

constexpr float kIq1Delta = 0.125f;

// IQ1_S: sub-block ib (32 values) has the u16 h = qh[ib]: group g (8 values) uses grid entry
// qs[4ib + g] | (bits 3g..3g+2 of h) << 8; bits 12..14 are the scale s, bit 15 the sign of the
// shift: x = d·(2s + 1)·(grid ± 0.125), minus when bit 15 is set.
void dequant_iq1_s(const uint8_t* b, float* y) {
  const float d = load_half(b);
  const uint8_t* qs = b + 2;
  for (int ib = 0; ib < 8; ++ib) {
    const uint16_t h = load_u16(b + 34 + 2 * ib);
    const float dl = d * float(2 * ((h >> 12) & 7) + 1);
    const float delta = h & 0x8000 ? -kIq1Delta : kIq1Delta;
    for (int g = 0; g < 4; ++g) {
      const int index = qs[4 * ib + g] | ((h >> (3 * g)) & 7) << 8;
      put_iq1(iq::kIq1sGrid[index], dl, delta, y + 32 * ib + 8 * g);
    }
  }
}

// IQ1_M: group e (32 groups of 8 values) takes the nibble n of qh[e / 2] (low for even e): grid
// entry qs[e] | (n & 7) << 8, shift -0.125 when n & 8 else +0.125. Scale t (16 of them, one per
// 16 values) is bits 3(t%4)..3(t%4)+2 of the u16 scales[t / 4]; the top nibbles of scales[0..3],
// in that order from the lowest, are the fp16 d: x = d·(2s + 1)·(grid + shift).
void dequant_iq1_m(const uint8_t* b, float* y) {
  const uint8_t* qs = b;
  const uint8_t* qh = b + 32;
  uint16_t sc[4];
  for (int i = 0; i < 4; ++i) sc[i] = load_u16(b + 48 + 2 * i);
  const float d = half_to_float(half_t(sc[0] >> 12 | (sc[1] >> 8 & 0x00f0) | (sc[2] >> 4 & 0x0f00) |
                                        (sc[3] & 0xf000)));
  for (int e = 0; e < 32; ++e) {
    const int n = (qh[e / 2] >> (4 * (e % 2))) & 15;
    const int t = e / 2;
    const float dl = d * float(2 * ((sc[t / 4] >> (3 * (t % 4))) & 7) + 1);
    put_iq1(iq::kIq1sGrid[qs[e] | (n & 7) << 8], dl, n & 8 ? -kIq1Delta : kIq1Delta, y + 8 * e);
  }
}

// ---- ternary formats (256-value super-blocks, values -d, 0, d) ----------------------------------

// A TQ1_0 byte holds up to five trits t0..t4 as the fraction N/243 (N = t0·81 + t1·27 + t2·9 +
// t3·3 + t4) scaled to 256 and rounded up: byte = ceil(N·256/243). Trit n is read off as the first
// base-3 digit of the fraction after multiplying by 3^n, the product kept mod 256 (which drops
// t0..t(n-1)): trit = (u8(byte·3^n)·3) >> 8, in 0..2 for any byte.
constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};

int tq1_trit(uint8_t byte, int n) { return (uint8_t(byte * kPow3[n]) * 3) >> 8; }

// The three runs of TQ1_0 bytes: `bytes` bytes from `offset`, `trits` of them per byte. Run r holds
// values in order: trit n of byte m is value (start of the run) + n·bytes + m.
struct Tq1Run {
  int offset, bytes, trits;
};
constexpr Tq1Run kTq1Runs[3] = {{0, 32, 5}, {32, 16, 5}, {48, 4, 4}};

// TQ1_0: qs[0..31] hold values 0..159, qs[32..47] values 160..239, qh (bytes 48..51) values
// 240..255, each run as Tq1Run says; d is bytes 52..53. x = (trit - 1)·d.
void dequant_tq1_0(const uint8_t* b, float* y) {
  const float d = load_half(b + 52);
  for (const Tq1Run& run : kTq1Runs) {
    for (int n = 0; n < run.trits; ++n) {
      for (int m = 0; m < run.bytes; ++m) *y++ = float(tq1_trit(b[run.offset + m], n) - 1) * d;
    }
  }
}

// TQ2_0: value 128·h + 32·l + m (h < 2, l < 4, m < 32) is bits 2l..2l+1 of qs[32·h + m]; d is bytes
// 64..65. x = (q - 1)·d (q = 3, which a quantiser never writes, gives 2·d).
void dequant_tq2_0(const uint8_t* b, float* y) {
  const float d = load_half(b + 64);
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 4; ++l) {
      for (int m = 0; m < 32; ++m) {
        y[128 * h + 32 * l + m] = float(((b[32 * h + m] >> (2 * l)) & 3) - 1) * d;
      }
    }
  }
}

// ---- quantisers ----------------------------------------------------------------------------------

float max_abs(const float* x, int n) {
  float m = 0;
  for (int j = 0; j < n; ++j) m = std::max(m, std::fabs(x[j]));
  return m;
}

// The value of largest magnitude, with its sign (the first one on ties).
float signed_max_abs(const float* x, int n) {
  float m = 0;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > std::fabs(m)) m = x[j];
  }
  return m;
}

// Q4_0 / Q5_0: d = -(largest magnitude)/2^(bits-1), so the extreme value maps to the lowest code
// exactly; values of the opposite sign may clip at the top code (error at most |d|).
void quant_sym(const float* x, uint8_t* b, int bits) {
  const int offset = 1 << (bits - 1);
  const int top = (1 << bits) - 1;
  const float mx = signed_max_abs(x, 32);
  const half_t dh = half_at_least(std::fabs(mx) / float(offset));
  const float d = half_to_float(dh);
  store_half(b, mx > 0 ? half_t(dh | 0x8000u) : dh);
  const float id = d != 0 ? (mx > 0 ? -1.0f : 1.0f) / d : 0.0f;
  int q[32];
  for (int j = 0; j < 32; ++j) q[j] = clamp_int(nearest(x[j] * id) + offset, 0, top);
  uint8_t* qs = b + (bits == 4 ? 2 : 6);
  for (int j = 0; j < 16; ++j) qs[j] = uint8_t((q[j] & 0x0f) | (q[j + 16] & 0x0f) << 4);
  if (bits == 5) {
    uint32_t qh = 0;
    for (int j = 0; j < 32; ++j) qh |= uint32_t(q[j] >> 4) << j;
    store_u32(b + 2, qh);
  }
}

// Q4_1 / Q5_1: x = q·d + m with m = the block minimum and d = range / (2^bits - 1).
void quant_affine(const float* x, uint8_t* b, int bits) {
  const int top = (1 << bits) - 1;
  float lo = x[0], hi = x[0];
  for (int j = 1; j < 32; ++j) {
    lo = std::min(lo, x[j]);
    hi = std::max(hi, x[j]);
  }
  const half_t mh = float_to_half(lo);
  const float m = half_to_float(mh);
  const half_t dh = half_at_least((hi - m) / float(top));
  const float d = half_to_float(dh);
  store_half(b, dh);
  store_half(b + 2, mh);
  const float id = d != 0 ? 1.0f / d : 0.0f;
  int q[32];
  for (int j = 0; j < 32; ++j) q[j] = clamp_int(nearest((x[j] - m) * id), 0, top);
  uint8_t* qs = b + (bits == 4 ? 4 : 8);
  for (int j = 0; j < 16; ++j) qs[j] = uint8_t((q[j] & 0x0f) | (q[j + 16] & 0x0f) << 4);
  if (bits == 5) {
    uint32_t qh = 0;
    for (int j = 0; j < 32; ++j) qh |= uint32_t(q[j] >> 4) << j;
    store_u32(b + 4, qh);
  }
}

void quant_q8_0(const float* x, uint8_t* b) {
  const half_t dh = half_at_least(max_abs(x, 32) / 127.0f);
  const float d = half_to_float(dh);
  store_half(b, dh);
  const float id = d != 0 ? 1.0f / d : 0.0f;
  int8_t* qs = reinterpret_cast<int8_t*>(b + 2);
  for (int j = 0; j < 32; ++j) qs[j] = int8_t(clamp_int(nearest(x[j] * id), -127, 127));
}

// The sub-block steps of the K-quants. Each step is stored as a multiple of the fp16 super-scale d,
// rounded up (so that the top code never clips) and capped at `max`; 0 where d is 0.
int step_multiple(float step, float d, int max) { return d != 0 ? int(std::min(float(max), std::ceil(step / d))) : 0; }

// The nearest multiple of dmin to `min`, capped at `max`; 0 where dmin is 0.
int min_multiple(float min, float dmin, int max) { return dmin != 0 ? std::min(max, nearest(min / dmin)) : 0; }

// Sub-blocks with a min (Q2_K, Q4_K, Q5_K): for each of the n_sub sub-blocks of `sub` values, step
// = (hi - min(0, lo)) / top and min = -min(0, lo); returns the largest of each through max_step and
// max_min.
void affine_sub_blocks(const float* x, int n_sub, int sub, int top, float* step, float* mins, float* max_step,
                       float* max_min) {
  *max_step = 0;
  *max_min = 0;
  for (int i = 0; i < n_sub; ++i) {
    float lo = 0, hi = x[sub * i];
    for (int l = 0; l < sub; ++l) {
      lo = std::min(lo, x[sub * i + l]);
      hi = std::max(hi, x[sub * i + l]);
    }
    step[i] = (hi - lo) / float(top);
    mins[i] = -lo;
    *max_step = std::max(*max_step, step[i]);
    *max_min = std::max(*max_min, mins[i]);
  }
}

// Symmetric 16-value sub-blocks (Q3_K, Q6_K): step = (largest magnitude) / top for each of the 16;
// returns the largest step.
float symmetric_sub_blocks(const float* x, int top, float* step) {
  float max_step = 0;
  for (int i = 0; i < 16; ++i) {
    step[i] = max_abs(x + 16 * i, 16) / float(top);
    max_step = std::max(max_step, step[i]);
  }
  return max_step;
}

// Q4_K / Q5_K: each 32-value sub-block gets step = range/(2^bits - 1) (range from min(0, lo) to
// hi) and min = -min(0, lo); steps and mins are stored as 6-bit multiples of the fp16 super-scales
// d and dmin, the step rounded up: error <= step/2 + dmin/2.
void quant_k_affine(const float* x, uint8_t* b, int bits) {
  const int top = (1 << bits) - 1;
  float step[8], mins[8], max_step, max_min;
  affine_sub_blocks(x, 8, 32, top, step, mins, &max_step, &max_min);
  const half_t dh = half_at_least(max_step / 63.0f), mh = half_at_least(max_min / 63.0f);
  const float d = half_to_float(dh), dmin = half_to_float(mh);
  int sc[8], mn[8];
  for (int i = 0; i < 8; ++i) {
    sc[i] = step_multiple(step[i], d, 63);
    mn[i] = min_multiple(mins[i], dmin, 63);
  }
  const int bytes = bits == 4 ? 144 : 176;
  std::memset(b, 0, size_t(bytes));
  store_half(b, dh);
  store_half(b + 2, mh);
  uint8_t* s = b + 4;
  for (int i = 0; i < 4; ++i) {
    s[i] = uint8_t(sc[i] | (sc[i + 4] >> 4) << 6);
    s[i + 4] = uint8_t(mn[i] | (mn[i + 4] >> 4) << 6);
    s[i + 8] = uint8_t((sc[i + 4] & 0x0f) | (mn[i + 4] & 0x0f) << 4);
  }
  uint8_t* qh = b + 16;  // Q5_K only
  uint8_t* qs = b + (bits == 4 ? 16 : 48);
  for (int i = 0; i < 8; ++i) {
    const float dl = d * float(sc[i]), ml = dmin * float(mn[i]);
    const float id = dl != 0 ? 1.0f / dl : 0.0f;
    for (int l = 0; l < 32; ++l) {
      const int q = clamp_int(nearest((x[32 * i + l] + ml) * id), 0, top);
      qs[32 * (i / 2) + l] |= uint8_t(i % 2 ? (q & 0x0f) << 4 : q & 0x0f);
      if (bits == 5) qh[l] |= uint8_t((q >> 4) << i);
    }
  }
}

// Q2_K: each 16-value sub-block gets step = range/3 (range from min(0, lo) to hi) and min =
// -min(0, lo), stored as 4-bit multiples of the fp16 super-scales d and dmin, the step rounded up:
// error <= step/2 + dmin/2.
void quant_q2_k(const float* x, uint8_t* b) {
  float step[16], mins[16], max_step, max_min;
  affine_sub_blocks(x, 16, 16, 3, step, mins, &max_step, &max_min);
  const half_t dh = half_at_least(max_step / 15.0f), mh = half_at_least(max_min / 15.0f);
  const float d = half_to_float(dh), dmin = half_to_float(mh);
  std::memset(b, 0, 84);
  uint8_t* scales = b;
  uint8_t* qs = b + 16;
  store_half(b + 80, dh);
  store_half(b + 82, mh);
  for (int i = 0; i < 16; ++i) scales[i] = uint8_t(step_multiple(step[i], d, 15) | min_multiple(mins[i], dmin, 15) << 4);
  for (int h = 0; h < 2; ++h) {
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t sc = scales[8 * h + 2 * j + l / 16];
        const float dl = d * float(sc & 0x0f), ml = dmin * float(sc >> 4);
        const float v = x[128 * h + 32 * j + l];
        const int q = dl != 0 ? clamp_int(nearest((v + ml) / dl), 0, 3) : 0;
        qs[32 * h + l] |= uint8_t(q << (2 * j));
      }
    }
  }
}

// Q3_K: each 16-value sub-block gets step = (largest magnitude)/3, stored as a 6-bit multiple
// (0..31 of the signed -32..31) of the fp16 super-scale d and rounded up so that no value clips
// (codes -3..3 of -4..3): error <= step/2.
void quant_q3_k(const float* x, uint8_t* b) {
  float step[16];
  const half_t dh = half_at_least(symmetric_sub_blocks(x, 3, step) / 31.0f);
  const float d = half_to_float(dh);
  std::memset(b, 0, 110);
  uint8_t* hmask = b;
  uint8_t* qs = b + 32;
  uint8_t* scales = b + 96;
  store_half(b + 108, dh);
  int sc[16];
  for (int i = 0; i < 16; ++i) {
    sc[i] = step_multiple(step[i], d, 31);
    const int stored = sc[i] + 32;  // the layout of q3_k_scale
    scales[i % 8] |= uint8_t((stored & 0x0f) << (i < 8 ? 0 : 4));
    scales[8 + i % 4] |= uint8_t((stored >> 4) << (2 * (i / 4)));
  }
  for (int h = 0; h < 2; ++h) {
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 32; ++l) {
        const float dl = d * float(sc[8 * h + 2 * j + l / 16]);
        const float v = x[128 * h + 32 * j + l];
        const int u = (dl != 0 ? clamp_int(nearest(v / dl), -4, 3) : 0) + 4;  // 0..7
        qs[32 * h + l] |= uint8_t((u & 3) << (2 * j));
        hmask[l] |= uint8_t((u >> 2) << (4 * h + j));
      }
    }
  }
}

// Q6_K: each 16-value sub-block gets step = (largest magnitude)/31, stored as an int8 multiple of the
// fp16 super-scale d and rounded up so that no value clips: error <= step/2.
void quant_q6_k(const float* x, uint8_t* b) {
  float step[16];
  const half_t dh = half_at_least(symmetric_sub_blocks(x, 31, step) / 127.0f);
  const float d = half_to_float(dh);
  std::memset(b, 0, 210);
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  int8_t* scales = reinterpret_cast<int8_t*>(b + 192);
  store_half(b + 208, dh);
  for (int i = 0; i < 16; ++i) scales[i] = int8_t(step_multiple(step[i], d, 127));
  for (int h = 0; h < 2; ++h) {
    for (int k = 0; k < 4; ++k) {
      for (int l = 0; l < 32; ++l) {
        const float dl = d * float(scales[8 * h + 2 * k + l / 16]);
        const float v = x[128 * h + 32 * k + l];
        const int q = (dl != 0 ? clamp_int(nearest(v / dl), -32, 31) : 0) + 32;
        ql[64 * h + 32 * (k % 2) + l] |= uint8_t(k < 2 ? q & 0x0f : (q & 0x0f) << 4);
        qh[32 * h + l] |= uint8_t((q >> 4) << (2 * k));
      }
    }
  }
}

// ---- IQ4_NL / IQ4_XS: codes from the non-linear table, scale by weighted least squares ---------

// Rounds half to even, as ggml's nearest_int does (std::lround rounds half away from zero).
int nearest_even(float v) { return int(std::nearbyint(v)); }

// The index of the table code nearest to v (a value in units of the scale); the upper one on a tie.
int nearest_iq4nl_index(float v) {
  if (v <= float(kIq4nlValues[0])) return 0;
  if (v >= float(kIq4nlValues[15])) return 15;
  int lo = 0, hi = 15;  // kIq4nlValues[lo] <= v < kIq4nlValues[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (v < float(kIq4nlValues[mid])) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return v - float(kIq4nlValues[lo]) < float(kIq4nlValues[hi]) - v ? lo : hi;
}

// The scale of one 32-value group, as ggml's reference quantiser chooses it without importance
// weights: each value is weighted by x², so the large values, which carry most of a dot product,
// are fitted best. For each candidate inverse scale (the largest-magnitude value mapped to +127,
// which clips to the top code 113, or to -127 - t for t in -7..7), the codes are the nearest table
// entries and the least-squares scale for those codes is sum(w·q·x) / sum(w·q²); the candidate
// with the largest sum(w·q·x)² / sum(w·q²), i.e. the least weighted squared error, wins. Returns 0
// for a group of (near) zeros.
float iq4_group_scale(const float* x) {
  float amax = 0, max = 0;  // largest magnitude, and that value with its sign
  for (int j = 0; j < 32; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  if (amax < 1e-15f) return 0;
  // Weighted sums of the codes chosen with inverse scale `id`: {sum(w·q·x), sum(w·q²)}.
  auto fit = [x](float id, float* sumqx, float* sumq2) {
    *sumqx = 0;
    *sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
      const float q = float(kIq4nlValues[nearest_iq4nl_index(id * x[j])]);
      const float w = x[j] * x[j];
      *sumqx += w * q * x[j];
      *sumq2 += w * q * q;
    }
  };
  float sumqx, sumq2;
  fit(1 / (-max / float(kIq4nlValues[0])), &sumqx, &sumq2);
  float d = sumqx / sumq2;
  float best = d * sumqx;
  constexpr int kTries = 7;
  for (int t = -kTries; t <= kTries; ++t) {
    fit(float(t + kIq4nlValues[0]) / max, &sumqx, &sumq2);
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

// Packs 32 table indices of scale `d` (codes nearest to x / d; index 8, code 1, when d is 0) into
// 16 bytes as unpack_nibbles reads them.
void pack_iq4_indices(const float* x, float d, uint8_t* qs) {
  const float id = d != 0 ? 1 / d : 0.0f;
  int q[32];
  for (int j = 0; j < 32; ++j) q[j] = nearest_iq4nl_index(id * x[j]);
  for (int j = 0; j < 16; ++j) qs[j] = uint8_t(q[j] | q[j + 16] << 4);
}

// IQ4_NL: the group's scale, stored as fp16; the codes are chosen with the scale before that
// rounding (as ggml does), so a code may differ from the nearest for the stored d where x / d lies
// within d's rounding (2^-11 relative) of the midpoint between two codes.
void quant_iq4_nl(const float* x, uint8_t* b) {
  const float d = iq4_group_scale(x);
  store_half(b, float_to_half(d));
  pack_iq4_indices(x, d, b + 2);
}

// IQ4_XS: the 8 sub-block scales as IQ4_NL's, then the super-block d = -(the one of largest
// magnitude)/32 in fp16 and each sub-block's 6-bit ls = round(scale / d) + 32 (clamped to 0..63),
// so the largest maps to -32·d exactly; each sub-block's codes are chosen for d·(ls - 32) (with d
// before fp16 rounding, as ggml does).
void quant_iq4_xs(const float* x, uint8_t* b) {
  float scales[8];
  float max_scale = 0;  // the sub-block scale of largest magnitude, with its sign
  for (int i = 0; i < 8; ++i) {
    scales[i] = iq4_group_scale(x + 32 * i);
    if (std::fabs(scales[i]) > std::fabs(max_scale)) max_scale = scales[i];
  }
  const float d = -max_scale / 32;
  store_half(b, float_to_half(d));
  const float id = d != 0 ? 1 / d : 0.0f;
  uint16_t scales_h = 0;
  uint8_t* scales_l = b + 4;
  std::memset(scales_l, 0, 4);
  for (int i = 0; i < 8; ++i) {
    const int l = clamp_int(nearest_even(id * scales[i]), -32, 31);
    pack_iq4_indices(x + 32 * i, d * float(l), b + 8 + 16 * i);
    const int ls = l + 32;
    scales_l[i / 2] |= uint8_t((ls & 0x0f) << (4 * (i % 2)));
    scales_h |= uint16_t((ls >> 4) << (2 * i));
  }
  b[2] = uint8_t(scales_h & 0xff);
  b[3] = uint8_t(scales_h >> 8);
}

// TQ1_0 / TQ2_0 (ggml's reference): d = max|x| and each value's trit is round(x / max|x|) + 1, in
// 0..2; values that are -a, 0 or a (a representable in fp16) come back exactly.
void ternary_trits(const float* x, uint8_t* b, int d_offset, int* t) {
  const float amax = max_abs(x, 256);
  const float id = amax != 0 ? 1.0f / amax : 0.0f;
  store_half(b + d_offset, float_to_half(amax));
  for (int j = 0; j < 256; ++j) t[j] = clamp_int(nearest(x[j] * id), -1, 1) + 1;
}

void quant_tq1_0(const float* x, uint8_t* b) {
  int t[256];
  ternary_trits(x, b, 52, t);
  int first = 0;  // the value the current run starts at
  for (const Tq1Run& run : kTq1Runs) {
    for (int m = 0; m < run.bytes; ++m) {
      int n3 = 0;  // the byte's trits as a base-3 number of five digits, the first most significant
      for (int n = 0; n < 5; ++n) n3 = 3 * n3 + (n < run.trits ? t[first + n * run.bytes + m] : 0);
      b[run.offset + m] = uint8_t((n3 * 256 + 242) / 243);
    }
    first += run.trits * run.bytes;
  }
}

void quant_tq2_0(const float* x, uint8_t* b) {
  int t[256];
  ternary_trits(x, b, 64, t);
  for (int h = 0; h < 2; ++h) {
    for (int m = 0; m < 32; ++m) {
      int q = 0;
      for (int l = 0; l < 4; ++l) q |= t[128 * h + 32 * l + m] << (2 * l);
      b[32 * h + m] = uint8_t(q);
    }
  }
}

half_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return half_t((bits >> 16) | 0x40);  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1);  // round to nearest even
  return half_t(bits >> 16);
}

float bf16_to_float(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

void check_row(GgmlType t, int64_t n, const char* what) {
  int64_t bv = 0;
  if (!ggml_type_block(t, &bv, nullptr)) {
    throw GgufError(std::string(what) + ": unknown type " + std::to_string(static_cast<uint32_t>(t)));
  }
  if (n < 0 || n % bv != 0) {
    throw GgufError(std::string(what) + ": " + std::to_string(n) + " values is not a multiple of the " +
                    ggml_type_name(t) + " block size " + std::to_string(bv));
  }
}

}  // namespace

bool can_dequantize(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16:
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1:
    case GgmlType::Q8_0: case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::Q4_K:
    case GgmlType::Q5_K: case GgmlType::Q6_K: case GgmlType::IQ4_NL: case GgmlType::IQ4_XS:
    case GgmlType::IQ2_XXS: case GgmlType::IQ2_XS: case GgmlType::IQ2_S: case GgmlType::IQ3_XXS:
    case GgmlType::IQ3_S: case GgmlType::IQ1_S: case GgmlType::IQ1_M: case GgmlType::TQ1_0:
    case GgmlType::TQ2_0:
      return true;
    default:
      return false;
  }
}

void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
  if (!can_dequantize(t)) {
    throw GgufError(std::string("dequantize_row: type ") + ggml_type_name(t) + " cannot be dequantised");
  }
  check_row(t, n, "dequantize_row");
  const uint8_t* s = static_cast<const uint8_t*>(src);
  switch (t) {
    case GgmlType::F32: std::memcpy(dst, src, size_t(n) * 4); return;
    case GgmlType::F16:
      for (int64_t j = 0; j < n; ++j) dst[j] = load_half(s + 2 * j);
      return;
    case GgmlType::BF16:
      for (int64_t j = 0; j < n; ++j) dst[j] = bf16_to_float(uint16_t(s[2 * j] | s[2 * j + 1] << 8));
      return;
    default: break;
  }
  int64_t bv = 0, bb = 0;
  ggml_type_block(t, &bv, &bb);
  if (const CodesFn codes = codes_of(t)) {
    for (int64_t i = 0; i < n / bv; ++i) dequant_codes(codes, s + i * bb, dst + i * bv);
    return;
  }
  void (*block)(const uint8_t*, float*) = nullptr;
  switch (t) {
    case GgmlType::Q4_1: block = dequant_q4_1; break;
    case GgmlType::Q5_1: block = dequant_q5_1; break;
    case GgmlType::Q2_K: block = dequant_q2_k; break;
    case GgmlType::Q3_K: block = dequant_q3_k; break;
    case GgmlType::Q4_K: block = dequant_q4_k; break;
    case GgmlType::Q5_K: block = dequant_q5_k; break;
    case GgmlType::Q6_K: block = dequant_q6_k; break;
    case GgmlType::IQ4_XS: block = dequant_iq4_xs; break;
    case GgmlType::IQ2_XXS: block = dequant_iq2_xxs; break;
    case GgmlType::IQ2_XS: block = dequant_iq2_xs; break;
    case GgmlType::IQ2_S: block = dequant_iq2_s; break;
    case GgmlType::IQ3_XXS: block = dequant_iq3_xxs; break;
    case GgmlType::IQ3_S: block = dequant_iq3_s; break;
    case GgmlType::IQ1_S: block = dequant_iq1_s; break;
    case GgmlType::IQ1_M: block = dequant_iq1_m; break;
    case GgmlType::TQ1_0: block = dequant_tq1_0; break;
    case GgmlType::TQ2_0: block = dequant_tq2_0; break;
    default: break;
  }
  for (int64_t i = 0; i < n / bv; ++i) block(s + i * bb, dst + i * bv);
}

bool block_codes(GgmlType t, const uint8_t* block, int* q, half_t* d) {
  const CodesFn codes = codes_of(t);
  if (!codes) return false;
  codes(block, q);
  *d = half_t(block[0] | block[1] << 8);
  return true;
}

bool can_quantize(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16:
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1:
    case GgmlType::Q8_0: case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::Q4_K:
    case GgmlType::Q5_K: case GgmlType::Q6_K: case GgmlType::IQ4_NL: case GgmlType::IQ4_XS:
    case GgmlType::TQ1_0: case GgmlType::TQ2_0:
      return true;
    default:
      return iq::is_codebook_type(t);
  }
}

void quantize_row(GgmlType t, const float* src, void* dst, int64_t n) {
  check_row(t, n, "quantize_row");
  uint8_t* d = static_cast<uint8_t*>(dst);
  switch (t) {
    case GgmlType::F32: std::memcpy(dst, src, size_t(n) * 4); return;
    case GgmlType::F16:
      for (int64_t j = 0; j < n; ++j) store_half(d + 2 * j, float_to_half(src[j]));
      return;
    case GgmlType::BF16:
      for (int64_t j = 0; j < n; ++j) store_half(d + 2 * j, float_to_bf16(src[j]));
      return;
    default: break;
  }
  void (*block)(const float*, uint8_t*) = nullptr;
  switch (t) {
    case GgmlType::Q4_0: block = [](const float* x, uint8_t* b) { quant_sym(x, b, 4); }; break;
    case GgmlType::Q5_0: block = [](const float* x, uint8_t* b) { quant_sym(x, b, 5); }; break;
    case GgmlType::Q4_1: block = [](const float* x, uint8_t* b) { quant_affine(x, b, 4); }; break;
    case GgmlType::Q5_1: block = [](const float* x, uint8_t* b) { quant_affine(x, b, 5); }; break;
    case GgmlType::Q8_0: block = quant_q8_0; break;
    case GgmlType::Q2_K: block = quant_q2_k; break;
    case GgmlType::Q3_K: block = quant_q3_k; break;
    case GgmlType::Q4_K: block = [](const float* x, uint8_t* b) { quant_k_affine(x, b, 4); }; break;
    case GgmlType::Q5_K: block = [](const float* x, uint8_t* b) { quant_k_affine(x, b, 5); }; break;
    case GgmlType::Q6_K: block = quant_q6_k; break;
    case GgmlType::IQ4_NL: block = quant_iq4_nl; break;
    case GgmlType::IQ4_XS: block = quant_iq4_xs; break;
    case GgmlType::TQ1_0: block = quant_tq1_0; break;
    case GgmlType::TQ2_0: block = quant_tq2_0; break;
    default:
      if (!iq::is_codebook_type(t)) {
        throw GgufError(std::string("quantize_row: type ") + ggml_type_name(t) + " cannot be quantised");
      }
      break;
  }
  int64_t bv = 0, bb = 0;
  ggml_type_block(t, &bv, &bb);
  for (int64_t i = 0; i < n / bv; ++i) {
    if (block) {
      block(src + i * bv, d + i * bb);
    } else {
      iq::quantize_block(t, src + i * bv, d + i * bb);
    }
  }
}

void parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
  const int64_t threads = std::min<int64_t>(n, std::max(1u, std::thread::hardware_concurrency()));
  if (threads <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<int64_t> next{0};
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      try {
        for (int64_t i = next++; i < n; i = next++) fn(i);
      } catch (...) {
        errors[size_t(t)] = std::current_exception();
        next = n;  // the other threads stop taking work
      }
    });
  }
  for (std::thread& th : pool) th.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace tllm
