// The conformance suite's reference ops (see reference.h): plain loops, fp64 arithmetic.
#include "ops/reference.h"

#include <algorithm>
#include <cmath>

namespace tllm::ref {

std::vector<float> dequantize(const HostMatrix& w) {
  std::vector<float> out(size_t(w.n * w.k));
  for (int64_t r = 0; r < w.n; ++r) {
    for (int64_t c = 0; c < w.k; ++c) {
      const int64_t i = r * w.k + c;
      if (w.type == WeightType::W8) {
        const double scale = half_to_float(w.scales[r * (w.k / kW8Group) + c / kW8Group]);
        out[size_t(i)] = float(double(w.q[i]) * scale);
      } else {
        out[size_t(i)] = half_to_float(w.f16[i]);
      }
    }
  }
  return out;
}

std::vector<double> matmul(const std::vector<float>& w, int64_t n, int64_t k, const std::vector<float>& x,
                           int64_t m, const std::vector<float>* bias, std::vector<double>* mag) {
  std::vector<double> y(size_t(m * n));
  if (mag) mag->assign(size_t(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0, abs_sum = 0;
      for (int64_t c = 0; c < k; ++c) {
        const double p = double(x[size_t(i * k + c)]) * double(w[size_t(j * k + c)]);
        sum += p;
        abs_sum += std::fabs(p);
      }
      if (bias) sum += (*bias)[size_t(j)];
      y[size_t(i * n + j)] = sum;
      if (mag) (*mag)[size_t(i * n + j)] = abs_sum;
    }
  }
  return y;
}

std::vector<double> rmsnorm(const std::vector<float>& x, const std::vector<float>& weight, int64_t m,
                            int64_t n, float eps) {
  std::vector<double> out(size_t(m * n));
  for (int64_t i = 0; i < m; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < n; ++j) ss += double(x[size_t(i * n + j)]) * x[size_t(i * n + j)];
    const double inv = 1.0 / std::sqrt(ss / double(n) + double(eps));
    for (int64_t j = 0; j < n; ++j) out[size_t(i * n + j)] = x[size_t(i * n + j)] * inv * weight[size_t(j)];
  }
  return out;
}

std::vector<double> rope(const std::vector<float>& x, const std::vector<int32_t>& pos, int n_heads,
                         int head_dim, float theta, RopeMode mode, const std::vector<float>& factors) {
  std::vector<double> out(x.begin(), x.end());
  const int half_dim = head_dim / 2;
  for (size_t r = 0; r < pos.size(); ++r) {
    for (int h = 0; h < n_heads; ++h) {
      double* head = out.data() + (r * size_t(n_heads) + size_t(h)) * size_t(head_dim);
      for (int j = 0; j < half_dim; ++j) {
        const double divisor = factors.empty() ? 1.0 : double(factors[size_t(j)]);
        const double angle = double(pos[r]) * std::pow(double(theta), -2.0 * j / head_dim) / divisor;
        const int a = mode == RopeMode::Normal ? 2 * j : j;
        const int b = mode == RopeMode::Normal ? 2 * j + 1 : j + half_dim;
        const double xa = head[a], xb = head[b];
        head[a] = xa * std::cos(angle) - xb * std::sin(angle);
        head[b] = xa * std::sin(angle) + xb * std::cos(angle);
      }
    }
  }
  return out;
}

void kv_append(const std::vector<float>& k, const std::vector<float>& v, const std::vector<int32_t>& pos,
               int n_head_kv, int head_dim, int n_ctx, std::vector<half_t>& k_cache,
               std::vector<half_t>& v_cache) {
  for (size_t r = 0; r < pos.size(); ++r) {
    for (int h = 0; h < n_head_kv; ++h) {
      for (int i = 0; i < head_dim; ++i) {
        const size_t src = (r * size_t(n_head_kv) + size_t(h)) * size_t(head_dim) + size_t(i);
        const size_t dst = (size_t(h) * size_t(n_ctx) + size_t(pos[r])) * size_t(head_dim) + size_t(i);
        k_cache[dst] = float_to_half(k[src]);
        v_cache[dst] = float_to_half(v[src]);
      }
    }
  }
}

std::vector<double> attention(const std::vector<float>& q, int64_t q_row_stride,
                              const std::vector<half_t>& k_cache, const std::vector<half_t>& v_cache,
                              int64_t m, int pos0, int n_head, int n_head_kv, int head_dim, int n_ctx,
                              float scale, std::vector<double>* score_mag) {
  std::vector<double> out(size_t(m) * size_t(n_head) * size_t(head_dim));
  if (score_mag) score_mag->assign(size_t(m) * size_t(n_head), 0.0);
  const int group = n_head / n_head_kv;
  for (int64_t i = 0; i < m; ++i) {
    const int n_kv = pos0 + int(i) + 1;
    for (int h = 0; h < n_head; ++h) {
      const int g = h / group;
      const float* qh = q.data() + i * q_row_stride + int64_t(h) * head_dim;
      auto k_at = [&](int j, int d) {
        return double(half_to_float(k_cache[(size_t(g) * n_ctx + size_t(j)) * head_dim + size_t(d)]));
      };
      auto v_at = [&](int j, int d) {
        return double(half_to_float(v_cache[(size_t(g) * n_ctx + size_t(j)) * head_dim + size_t(d)]));
      };
      std::vector<double> s(static_cast<size_t>(n_kv));
      double max_s = -INFINITY;
      for (int j = 0; j < n_kv; ++j) {
        double dot = 0, abs_dot = 0;
        for (int d = 0; d < head_dim; ++d) {
          dot += double(qh[d]) * k_at(j, d);
          abs_dot += std::fabs(double(qh[d]) * k_at(j, d));
        }
        s[size_t(j)] = dot * double(scale);
        if (score_mag) {
          double& mag = (*score_mag)[size_t(i) * n_head + size_t(h)];
          mag = std::max(mag, abs_dot * double(scale));
        }
        max_s = std::max(max_s, s[size_t(j)]);
      }
      double sum = 0;
      for (int j = 0; j < n_kv; ++j) {
        s[size_t(j)] = std::exp(s[size_t(j)] - max_s);
        sum += s[size_t(j)];
      }
      double* o = out.data() + (size_t(i) * n_head + size_t(h)) * head_dim;
      for (int d = 0; d < head_dim; ++d) {
        double acc = 0;
        for (int j = 0; j < n_kv; ++j) acc += s[size_t(j)] * v_at(j, d);
        o[d] = acc / sum;
      }
    }
  }
  return out;
}

double silu(double g) { return g / (1.0 + std::exp(-g)); }

std::vector<double> silu_mul(const std::vector<double>& gate, const std::vector<double>& up) {
  std::vector<double> out(gate.size());
  for (size_t i = 0; i < gate.size(); ++i) out[i] = silu(gate[i]) * up[i];
  return out;
}

int64_t argmax(const std::vector<float>& x) {
  int64_t best = 0;
  for (size_t i = 1; i < x.size(); ++i) {
    if (x[i] > x[size_t(best)]) best = int64_t(i);
  }
  return best;
}

}  // namespace tllm::ref
