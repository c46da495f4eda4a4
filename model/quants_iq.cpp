// Quantisers for ggml's codebook formats (the i-quants IQ1_S … IQ3_S). Each picks groups of 8 or 4
// values from a codebook (model/iq_grids.h), scaled per sub-block; all seven quantise a 256-value
// super-block the same way, and differ only in their codebook, their scales and their bit layout:
//
//   1. Codes for a unit u (the value of one codebook step). The sign formats keep the sign of each
//      value; where a format stores 7 signs of 8 and implies an even number of negatives, the value
//      of smallest magnitude takes the wrong sign when the count is odd. Each codebook row (8 or 4
//      values) is then the entry nearest to the targets (|x| / u, or x / u - shift for IQ1, whose
//      codebook is signed) rounded to the codebook's levels: a table built once per codebook maps
//      every point of rounded targets to its nearest entry. (Searching all 256 to 2,048 entries
//      for every row would take minutes for a 0.5B model.)
//   2. Each scale sub-block (32 values; 16 in IQ2_XS, IQ2_S and IQ1_M) gets the unit of least
//      squared error among these candidates, each refitted by least squares to the codes it chose:
//      u = r·max|x| / (the largest codebook level) for r = 0.5, 0.6, …, 1.3, and max|x| over each
//      smaller positive level (so that a block of equal magnitudes finds the entries that are one
//      level throughout, where the codebook has them).
//   3. The super-block scale d: the largest unit over the scale factor of the top stored scale,
//      rounded to fp16, or 0.92 times that (about 1% less error on Gaussian rows). Each sub-block
//      takes, of the three stored scales s nearest its unit, the one of least error at
//      u = d·factor(s); the d of less total error wins.
//
// No importance weights, as in the other quantisers of this project. A block whose values are the
// dequantised values of a block with the top scale in one sub-block comes back exactly.
#include "model/quants_iq.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/half.h"
#include "model/block_bytes.h"
#include "model/iq_grids.h"

namespace tllm::iq {
namespace {

// A codebook: `entries` rows of `width` values, its distinct values (levels, ascending) and, for
// every point whose coordinates are levels, the nearest row. A point's key is its level indices as
// a number in base levels.size(), coordinate 0 the least significant digit.
class Codebook {
 public:
  template <class T, size_t N, size_t W>
  explicit Codebook(const T (&grid)[N][W]) : entries_(int(N)), width_(int(W)) {
    for (size_t e = 0; e < N; ++e) {
      for (size_t j = 0; j < W; ++j) values_.push_back(float(grid[e][j]));
    }
    levels_ = values_;
    std::sort(levels_.begin(), levels_.end());
    levels_.erase(std::unique(levels_.begin(), levels_.end()), levels_.end());
    const int n_levels = int(levels_.size());
    for (int l = 0; l + 1 < n_levels; ++l) midpoints_.push_back((levels_[size_t(l)] + levels_[size_t(l) + 1]) / 2);
    int keys = 1;
    for (int j = 0; j < width_; ++j) keys *= n_levels;
    nearest_.resize(size_t(keys));
    std::vector<float> point(static_cast<size_t>(width_));
    for (int key = 0; key < keys; ++key) {
      for (int j = 0, k = key; j < width_; ++j, k /= n_levels) point[size_t(j)] = levels_[size_t(k % n_levels)];
      float best = std::numeric_limits<float>::max();
      for (int e = 0; e < entries_; ++e) {
        float dist = 0;
        for (int j = 0; j < width_; ++j) {
          const float diff = row(e)[j] - point[size_t(j)];
          dist += diff * diff;
        }
        if (dist < best) {  // the first entry on a tie
          best = dist;
          nearest_[size_t(key)] = uint16_t(e);
        }
      }
    }
  }

  int width() const { return width_; }
  float top() const { return levels_.back(); }
  const std::vector<float>& levels() const { return levels_; }
  const float* row(int e) const { return values_.data() + size_t(e) * size_t(width_); }

  // The entry nearest to `t` (width values) rounded to the levels (the lower one on a tie).
  int entry_near(const float* t) const {
    const int n_levels = int(levels_.size());
    int key = 0;
    for (int j = width_ - 1; j >= 0; --j) {
      int l = 0;
      for (const float m : midpoints_) l += t[j] > m;
      key = key * n_levels + l;
    }
    return nearest_[size_t(key)];
  }

 private:
  int entries_, width_;
  std::vector<float> values_;    // (entries, width)
  std::vector<float> levels_;    // (n_levels)
  std::vector<float> midpoints_;  // (n_levels - 1): between consecutive levels
  std::vector<uint16_t> nearest_;  // (n_levels^width)
};

// How a format signs its codebook's values.
enum class Signs : uint8_t {
  Parity,  // 8 signs a group, 7 stored: the number of negative values is even
  Free,    // 8 signs a group, all stored
  Shift,   // a signed codebook; each value moves by +1/8 or -1/8 (IQ1)
};

constexpr float kShift = 0.125f;

struct Format {
  const Codebook* book;
  int sub;                  // values a stored scale covers
  int scale_max;            // the largest stored scale
  float (*factor)(int s);   // unit = d·factor(s)
  Signs signs;
  bool shift_per_group;     // Signs::Shift: one shift per 8 values, else one per sub-block
};

// One super-block's codes, as the packers lay them out.
struct Codes {
  half_t d = 0;
  int scale[16] = {};        // (256 / sub)
  int entry[64] = {};        // (256 / width): codebook rows in value order
  uint8_t neg[32] = {};      // (32 groups of 8 values): bit j where value j is negative (sign formats)
  bool shift_neg[32] = {};   // (32 groups of 8 values): the shift is -1/8 (IQ1)
};

// Least-squares sums of a sub-block's codes v (values in units) against x: the squared error at
// unit u is sxx - 2·u·sxv + u²·svv.
struct Fit {
  double sxv = 0, svv = 0;
  void add(float x, float v) {
    sxv += double(x) * v;
    svv += double(v) * v;
  }
  double error(double u, double sxx) const { return sxx - 2 * u * sxv + u * u * svv; }
};

// Codes of the 8 values x (group g of the super-block) at unit u, for the sign formats.
Fit encode_signed_group(const Format& f, const float* x, float u, int g, Codes* c) {
  const float inv = 1 / u;
  uint8_t neg = 0;
  float t[8];
  int smallest = 0;
  for (int j = 0; j < 8; ++j) {
    if (x[j] < 0) neg = uint8_t(neg | 1u << j);
    t[j] = std::fabs(x[j]) * inv;
    if (std::fabs(x[j]) < std::fabs(x[smallest])) smallest = j;
  }
  if (f.signs == Signs::Parity && __builtin_popcount(neg) % 2 != 0) {
    neg = uint8_t(neg ^ 1u << smallest);
    t[smallest] = -t[smallest];
  }
  c->neg[g] = neg;
  Fit fit;
  const int w = f.book->width();
  for (int r = 0; r < 8 / w; ++r) {
    const int e = f.book->entry_near(t + r * w);
    c->entry[g * 8 / w + r] = e;
    for (int k = 0; k < w; ++k) {
      const int j = r * w + k;
      fit.add(x[j], (neg >> j) & 1 ? -f.book->row(e)[k] : f.book->row(e)[k]);
    }
  }
  return fit;
}

// The entry for the 8 values x at unit u with the given shift, for IQ1; `fit` takes its sums.
int shifted_group(const Format& f, const float* x, float u, bool shift_neg, Fit* fit) {
  const float delta = shift_neg ? -kShift : kShift, inv = 1 / u;
  float t[8];
  for (int j = 0; j < 8; ++j) t[j] = x[j] * inv - delta;
  const int e = f.book->entry_near(t);
  for (int j = 0; j < 8; ++j) fit->add(x[j], f.book->row(e)[j] + delta);
  return e;
}

// Adds b's sums to a.
void merge(Fit* a, const Fit& b) {
  a->sxv += b.sxv;
  a->svv += b.svv;
}

// Codes of sub-block i (f.sub values from x) at unit u > 0.
Fit encode_sub(const Format& f, const float* x, float u, int i, Codes* c) {
  const int groups = f.sub / 8, g0 = i * groups;
  Fit fit;
  if (f.signs != Signs::Shift) {
    for (int g = 0; g < groups; ++g) merge(&fit, encode_signed_group(f, x + 8 * g, u, g0 + g, c));
    return fit;
  }
  // Each shift over the unit (a group, or the whole sub-block): its entries and sums.
  const int unit_groups = f.shift_per_group ? 1 : groups;
  for (int first = 0; first < groups; first += unit_groups) {
    Fit by_shift[2];
    int entries[2][4];
    for (int neg = 0; neg < 2; ++neg) {
      for (int g = first; g < first + unit_groups; ++g) {
        entries[neg][g - first] = shifted_group(f, x + 8 * g, u, neg != 0, &by_shift[neg]);
      }
    }
    const int neg = by_shift[1].error(u, 0) < by_shift[0].error(u, 0) ? 1 : 0;
    for (int g = first; g < first + unit_groups; ++g) {
      c->entry[g0 + g] = entries[neg][g - first];
      c->shift_neg[g0 + g] = neg != 0;
    }
    merge(&fit, by_shift[neg]);
  }
  return fit;
}

double sum_squares(const float* x, int n) {
  double s = 0;
  for (int j = 0; j < n; ++j) s += double(x[j]) * x[j];
  return s;
}

// The unit of least squared error for the sub-block x (step 2 above); 0 for a sub-block of zeros.
float best_unit(const Format& f, const float* x) {
  float amax = 0;
  for (int j = 0; j < f.sub; ++j) amax = std::max(amax, std::fabs(x[j]));
  if (amax == 0) return 0;
  const double sxx = sum_squares(x, f.sub);
  const float top = f.book->top() + (f.signs == Signs::Shift ? kShift : 0.0f);
  double best_error = std::numeric_limits<double>::max();
  float best = amax / top;
  Codes scratch;
  auto consider = [&](float u) {
    const Fit fit = encode_sub(f, x, u, 0, &scratch);
    if (fit.sxv <= 0 || fit.svv <= 0) return;
    const double fitted = fit.sxv / fit.svv;
    const double error = sxx - fit.sxv * fitted;
    if (error < best_error) {
      best_error = error;
      best = float(fitted);
    }
  };
  for (int k = 0; k <= 8; ++k) consider(amax / top * float(5 + k) / 10.0f);
  for (const float level : f.book->levels()) {
    if (level > 0 && level < f.book->top()) consider(amax / level);
  }
  return best;
}

// Codes for the super-block x with the fp16 scale dh (step 3 above); returns the squared error.
double encode_with_d(const Format& f, const float* x, const float* units, half_t dh, Codes* c) {
  const float d = half_to_float(dh);
  c->d = dh;
  double total = 0;
  for (int i = 0; i < 256 / f.sub; ++i) {
    const float* xs = x + i * f.sub;
    const double sxx = sum_squares(xs, f.sub);
    int nearest = 0;
    for (int s = 1; s <= f.scale_max; ++s) {
      if (std::fabs(d * f.factor(s) - units[i]) < std::fabs(d * f.factor(nearest) - units[i])) nearest = s;
    }
    double best_error = std::numeric_limits<double>::max();
    int best = nearest;
    for (int s = std::max(0, nearest - 1); s <= std::min(f.scale_max, nearest + 1); ++s) {
      const float u = d * f.factor(s);
      const double error = encode_sub(f, xs, u, i, c).error(u, sxx);
      if (error < best_error) {
        best_error = error;
        best = s;
      }
    }
    c->scale[i] = best;
    encode_sub(f, xs, d * f.factor(best), i, c);
    total += best_error;
  }
  return total;
}

Codes encode(const Format& f, const float* x) {
  float units[16];
  float max_unit = 0;
  for (int i = 0; i < 256 / f.sub; ++i) {
    units[i] = best_unit(f, x + i * f.sub);
    max_unit = std::max(max_unit, units[i]);
  }
  Codes best;  // all zero: d = 0 gives zeros whatever the codes
  double best_error = std::numeric_limits<double>::max();
  for (const float ratio : {1.0f, 0.92f}) {
    const half_t dh = float_to_half(max_unit / f.factor(f.scale_max) * ratio);
    if (half_to_float(dh) <= 0 || !std::isfinite(half_to_float(dh))) continue;
    Codes c;
    const double error = encode_with_d(f, x, units, dh, &c);
    if (error < best_error) {
      best_error = error;
      best = c;
    }
  }
  return best;
}

// ---- bit layouts (the dequantisers in quants.cpp read them); d first, except in IQ1_M ----------

// The u32 of an IQ2_XXS / IQ3_XXS sub-block: the 7 stored signs of its 4 groups and the scale.
uint32_t signs_and_scale(const Codes& c, int ib) {
  uint32_t aux = uint32_t(c.scale[ib]) << 28;
  for (int g = 0; g < 4; ++g) aux |= uint32_t(c.neg[4 * ib + g] & 127) << (7 * g);
  return aux;
}

// The 4-bit scales of IQ2_XS and IQ2_S: scale k in the low (even k) or high nibble of byte k / 2.
void pack_nibble_scales(const Codes& c, int n, uint8_t* scales) {
  for (int k = 0; k < n; ++k) scales[k / 2] = uint8_t(scales[k / 2] | c.scale[k] << (4 * (k % 2)));
}

void pack_iq2_xxs(const Codes& c, uint8_t* b) {
  store_u16(b, c.d);
  for (int ib = 0; ib < 8; ++ib) {
    for (int g = 0; g < 4; ++g) b[2 + 8 * ib + g] = uint8_t(c.entry[4 * ib + g]);
    store_u32(b + 6 + 8 * ib, signs_and_scale(c, ib));
  }
}

void pack_iq2_xs(const Codes& c, uint8_t* b) {
  store_u16(b, c.d);
  for (int g = 0; g < 32; ++g) store_u16(b + 2 + 2 * g, uint16_t(c.entry[g] | (c.neg[g] & 127) << 9));
  pack_nibble_scales(c, 16, b + 66);
}

void pack_iq2_s(const Codes& c, uint8_t* b) {
  store_u16(b, c.d);
  for (int g = 0; g < 32; ++g) {
    b[2 + g] = uint8_t(c.entry[g] & 255);
    b[34 + g] = c.neg[g];
    b[66 + g / 4] = uint8_t(b[66 + g / 4] | (c.entry[g] >> 8) << (2 * (g % 4)));
  }
  pack_nibble_scales(c, 16, b + 74);
}

void pack_iq3_xxs(const Codes& c, uint8_t* b) {
  store_u16(b, c.d);
  for (int k = 0; k < 64; ++k) b[2 + k] = uint8_t(c.entry[k]);
  for (int ib = 0; ib < 8; ++ib) store_u32(b + 66 + 4 * ib, signs_and_scale(c, ib));
}

void pack_iq3_s(const Codes& c, uint8_t* b) {
  store_u16(b, c.d);
  for (int k = 0; k < 64; ++k) {
    b[2 + k] = uint8_t(c.entry[k] & 255);
    b[66 + k / 8] = uint8_t(b[66 + k / 8] | (c.entry[k] >> 8) << (k % 8));
  }
  for (int g = 0; g < 32; ++g) b[74 + g] = c.neg[g];
  pack_nibble_scales(c, 8, b + 106);
}

void pack_iq1_s(const Codes& c, uint8_t* b) {
  store_u16(b, c.d);
  for (int ib = 0; ib < 8; ++ib) {
    unsigned h = unsigned(c.scale[ib]) << 12 | unsigned(c.shift_neg[4 * ib]) << 15;
    for (int g = 0; g < 4; ++g) {
      b[2 + 4 * ib + g] = uint8_t(c.entry[4 * ib + g] & 255);
      h |= unsigned(c.entry[4 * ib + g] >> 8) << (3 * g);
    }
    store_u16(b + 34 + 2 * ib, uint16_t(h));
  }
}

void pack_iq1_m(const Codes& c, uint8_t* b) {
  for (int e = 0; e < 32; ++e) {
    b[e] = uint8_t(c.entry[e] & 255);
    const unsigned n = unsigned(c.entry[e] >> 8) | unsigned(c.shift_neg[e]) << 3;
    b[32 + e / 2] = uint8_t(b[32 + e / 2] | n << (4 * (e % 2)));
  }
  for (int i = 0; i < 4; ++i) {
    unsigned sc = (unsigned(c.d) >> (4 * i) & 15) << 12;
    for (int t = 4 * i; t < 4 * i + 4; ++t) sc |= unsigned(c.scale[t]) << (3 * (t % 4));
    store_u16(b + 48 + 2 * i, uint16_t(sc));
  }
}

// ---- the formats ---------------------------------------------------------------------------------

// A codebook's table, built on first use.
template <const auto& grid>
const Codebook* book() {
  static const Codebook b(grid);
  return &b;
}

float iq2_factor(int s) { return (0.5f + float(s)) * 0.25f; }
float iq3xxs_factor(int s) { return (0.5f + float(s)) * 0.5f; }
float odd_factor(int s) { return float(2 * s + 1); }  // IQ3_S, IQ1_S, IQ1_M

struct Writer {
  Format format;
  void (*pack)(const Codes&, uint8_t*);
};

Writer writer_of(GgmlType t) {
  switch (t) {
    case GgmlType::IQ2_XXS: return {{book<kIq2xxsGrid>(), 32, 15, iq2_factor, Signs::Parity, false}, pack_iq2_xxs};
    case GgmlType::IQ2_XS: return {{book<kIq2xsGrid>(), 16, 15, iq2_factor, Signs::Parity, false}, pack_iq2_xs};
    case GgmlType::IQ2_S: return {{book<kIq2sGrid>(), 16, 15, iq2_factor, Signs::Free, false}, pack_iq2_s};
    case GgmlType::IQ3_XXS: return {{book<kIq3xxsGrid>(), 32, 15, iq3xxs_factor, Signs::Parity, false}, pack_iq3_xxs};
    case GgmlType::IQ3_S: return {{book<kIq3sGrid>(), 32, 15, odd_factor, Signs::Free, false}, pack_iq3_s};
    case GgmlType::IQ1_S: return {{book<kIq1sGrid>(), 32, 7, odd_factor, Signs::Shift, false}, pack_iq1_s};
    default: return {{book<kIq1sGrid>(), 16, 7, odd_factor, Signs::Shift, true}, pack_iq1_m};  // IQ1_M
  }
}

}  // namespace

bool is_codebook_type(GgmlType t) {
  switch (t) {
    case GgmlType::IQ2_XXS: case GgmlType::IQ2_XS: case GgmlType::IQ2_S: case GgmlType::IQ3_XXS:
    case GgmlType::IQ3_S: case GgmlType::IQ1_S: case GgmlType::IQ1_M:
      return true;
    default:
      return false;
  }
}

void quantize_block(GgmlType t, const float* x, uint8_t* b) {
  int64_t block_bytes = 0;
  ggml_type_block(t, nullptr, &block_bytes);
  std::memset(b, 0, size_t(block_bytes));
  const Writer w = writer_of(t);
  w.pack(encode(w.format, x), b);
}

}  // namespace tllm::iq
