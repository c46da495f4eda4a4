// A model-free decode loop: a two-layer transformer with random weights, run token by token on the
// backend and compared with the same chain of reference ops. Per-op tests cannot see ordering or
// synchronisation faults of an asynchronous backend (an op that starts before the one producing its
// input has finished, an upload of the position that overtakes the ops before it, a replayed step
// that keeps stale values); here every such fault changes the logits.
//
// Two forms of the loop, each against the same reference of the plain op sequence:
//   - Unfused: embedding -> per layer [rmsnorm -> matmul_m1 qkv (bias) -> rope q, k -> kv_append ->
//     attention_decode -> matmul_m1 accumulate (o) -> rmsnorm -> matmul_m1 gate, up -> silu_mul ->
//     matmul_m1 accumulate (down)] -> rmsnorm -> matmul_m1 logits -> argmax, with every step's
//     token fed back through backend memory and nothing downloaded until the last step;
//   - Fused: the same with the rmsnorm prologues, the rope + KV append epilogue of the QKV projection,
//     the output projection in attention_decode and the SwiGLU epilogue, each step issued inside
//     run_step (recorded once and replayed where the backend captures steps).
#include <algorithm>
#include <cmath>

#include "ops/conformance.h"
#include "ops/reference.h"

namespace tllm::test {
namespace {

constexpr int kEmbd = 256, kHead = 4, kHeadKv = 2, kHeadDim = 64, kFf = 512, kVocab = 1000, kCtx = 32;
constexpr int kLayers = 2, kSteps = 8;
constexpr int kQDim = kHead * kHeadDim, kKvDim = kHeadKv * kHeadDim, kQkvDim = kQDim + 2 * kKvDim;
constexpr float kEps = 1e-6f, kTheta = 1000000.0f;

// Rows [a; b] of two matrices of the same type and k.
HostWeights stack(const HostWeights& a, const HostWeights& b) {
  HostWeights s = a;
  s.append_rows(b);
  return s;
}

struct LayerWeights {
  HostWeights qkv, o, gate, up, down;  // (kQkvDim, kEmbd), (kEmbd, kQDim), (kFf, kEmbd) x2, (kEmbd, kFf)
  HostWeights gate_up;                 // (2·kFf, kEmbd) = [gate; up]
  std::vector<float> qkv_bias;         // (kQkvDim)
  std::vector<float> attn_norm, ffn_norm;  // (kEmbd)
};

struct Weights {
  HostWeights embd;    // (kVocab, kEmbd), W8
  HostWeights output;  // (kVocab, kEmbd), F16
  std::vector<float> out_norm;
  LayerWeights layer[kLayers];
};

Weights make_weights(Rng& rng) {
  // Scales chosen so activations stay of order one through the layers.
  Weights w;
  w.embd = random_w8(rng, kVocab, kEmbd, 0.004f, 0.012f);
  w.output = random_f16(rng, kVocab, kEmbd, 0.15f);
  w.out_norm = random_floats(rng, kEmbd, 0.8f, 1.2f);
  for (LayerWeights& l : w.layer) {
    l.qkv = random_w8(rng, kQkvDim, kEmbd, 0.001f, 0.003f);
    l.o = random_w8(rng, kEmbd, kQDim, 0.0005f, 0.0015f);
    l.gate = random_w8(rng, kFf, kEmbd, 0.001f, 0.003f);
    l.up = random_w8(rng, kFf, kEmbd, 0.001f, 0.003f);
    l.down = random_w8(rng, kEmbd, kFf, 0.0005f, 0.0015f);
    l.gate_up = stack(l.gate, l.up);
    l.qkv_bias = random_floats(rng, kQkvDim, -0.5f, 0.5f);
    l.attn_norm = random_floats(rng, kEmbd, 0.8f, 1.2f);
    l.ffn_norm = random_floats(rng, kEmbd, 0.8f, 1.2f);
  }
  return w;
}

// The reference decode loop, fed the backend's tokens (so a near-tie in argmax cannot make the two
// loops part ways); returns (kSteps, kVocab) logits.
std::vector<double> reference_logits(const Weights& w, const std::vector<int32_t>& tokens) {
  struct Deq {
    std::vector<float> qkv, o, gate, up, down;
  } deq[kLayers];
  for (int l = 0; l < kLayers; ++l) {
    deq[l] = {ref::dequantize(w.layer[l].qkv.view()), ref::dequantize(w.layer[l].o.view()),
              ref::dequantize(w.layer[l].gate.view()), ref::dequantize(w.layer[l].up.view()),
              ref::dequantize(w.layer[l].down.view())};
  }
  const std::vector<float> embd = ref::dequantize(w.embd.view());
  const std::vector<float> output = ref::dequantize(w.output.view());
  std::vector<half_t> k_cache[kLayers], v_cache[kLayers];
  for (int l = 0; l < kLayers; ++l) {
    k_cache[l].assign(size_t(kHeadKv) * kCtx * kHeadDim, 0);
    v_cache[l].assign(size_t(kHeadKv) * kCtx * kHeadDim, 0);
  }
  auto add_to = [](std::vector<float>& x, const std::vector<double>& d) {
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(x[i] + d[i]);
  };
  std::vector<double> logits;
  for (int pos = 0; pos < kSteps; ++pos) {
    std::vector<float> x(embd.begin() + tokens[size_t(pos)] * kEmbd, embd.begin() + (tokens[size_t(pos)] + 1) * kEmbd);
    for (int l = 0; l < kLayers; ++l) {
      const LayerWeights& lw = w.layer[l];
      const std::vector<float> xn = round_half(ref::rmsnorm(x, lw.attn_norm, 1, kEmbd, kEps));
      const std::vector<float> qkv = to_float(ref::matmul(deq[l].qkv, kQkvDim, kEmbd, xn, 1, &lw.qkv_bias));
      const std::vector<float> q = to_float(ref::rope(std::vector<float>(qkv.begin(), qkv.begin() + kQDim), {pos},
                                                      kHead, kHeadDim, kTheta, RopeMode::Neox));
      const std::vector<float> k = to_float(ref::rope(std::vector<float>(qkv.begin() + kQDim, qkv.begin() + kQDim + kKvDim),
                                                      {pos}, kHeadKv, kHeadDim, kTheta, RopeMode::Neox));
      const std::vector<float> v(qkv.begin() + kQDim + kKvDim, qkv.end());
      ref::kv_append(k, v, {pos}, kHeadKv, kHeadDim, kCtx, k_cache[l], v_cache[l]);
      const std::vector<float> att = round_half(ref::attention(q, kQDim, k_cache[l], v_cache[l], 1, pos, kHead,
                                                               kHeadKv, kHeadDim, kCtx, 1.0f / std::sqrt(float(kHeadDim))));
      add_to(x, ref::matmul(deq[l].o, kEmbd, kQDim, att, 1, nullptr));
      const std::vector<float> xf = round_half(ref::rmsnorm(x, lw.ffn_norm, 1, kEmbd, kEps));
      const std::vector<double> gate = ref::matmul(deq[l].gate, kFf, kEmbd, xf, 1, nullptr);
      const std::vector<double> up = ref::matmul(deq[l].up, kFf, kEmbd, xf, 1, nullptr);
      const std::vector<float> h = round_half(ref::silu_mul(gate, up));
      add_to(x, ref::matmul(deq[l].down, kEmbd, kFf, h, 1, nullptr));
    }
    const std::vector<float> xo = round_half(ref::rmsnorm(x, w.out_norm, 1, kEmbd, kEps));
    const std::vector<double> step_logits = ref::matmul(output, kVocab, kEmbd, xo, 1, nullptr);
    logits.insert(logits.end(), step_logits.begin(), step_logits.end());
  }
  return logits;
}

class DecodeStepTest : public OpsTest {
 protected:
  struct Layer {
    std::unique_ptr<Matrix> qkv, o, gate, up, down, gate_up;
    Buffer qkv_bias, attn_norm, ffn_norm, k_cache, v_cache;
  };

  void SetUp() override {
    OpsTest::SetUp();
    if (IsSkipped()) return;
    Rng rng(1101);
    w_ = make_weights(rng);
    embd_ = be().upload_matrix(w_.embd.view());
    output_ = be().upload_matrix(w_.output.view());
    out_norm_ = upload(w_.out_norm);
    for (int l = 0; l < kLayers; ++l) {
      const LayerWeights& lw = w_.layer[l];
      Layer& d = layer_[l];
      d.qkv = be().upload_matrix(lw.qkv.view());
      d.o = be().upload_matrix(lw.o.view());
      d.gate = be().upload_matrix(lw.gate.view());
      d.up = be().upload_matrix(lw.up.view());
      d.down = be().upload_matrix(lw.down.view());
      d.gate_up = be().upload_matrix(lw.gate_up.view());
      d.qkv_bias = upload(lw.qkv_bias);
      d.attn_norm = upload(lw.attn_norm);
      d.ffn_norm = upload(lw.ffn_norm);
      d.k_cache = alloc<half_t>(size_t(kHeadKv) * kCtx * kHeadDim);
      d.v_cache = alloc<half_t>(size_t(kHeadKv) * kCtx * kHeadDim);
    }
    x_ = alloc<float>(kEmbd);
    xn_ = alloc<half_t>(kFf);
    qkv_ = alloc<float>(kQkvDim);
    att_ = alloc<half_t>(kQDim);
    gate_ = alloc<float>(kFf);
    up_ = alloc<float>(kFf);
    pos_ = alloc<int32_t>(1);
    n_kv_ = alloc<int32_t>(1);
  }

  MatmulDesc mm(const Matrix* w, const half_t* x, float* y, bool accumulate = false) {
    MatmulDesc d;
    d.w = w;
    d.x = x;
    d.y = y;
    d.accumulate = accumulate;
    return d;
  }
  RmsNormDesc norm(const Buffer& weight, half_t* out) {
    RmsNormDesc d;
    d.x = x_.as<float>();
    d.weight = weight.as<float>();
    d.out = out;
    d.n = kEmbd;
    d.eps = kEps;
    return d;
  }
  AttentionDecodeDesc attention(const Layer& l) {
    AttentionDecodeDesc d;
    d.q = qkv_.as<float>();
    d.k_cache = l.k_cache.as<half_t>();
    d.v_cache = l.v_cache.as<half_t>();
    d.out = att_.as<half_t>();
    d.n_kv = n_kv_.as<int32_t>();
    d.n_head = kHead;
    d.n_head_kv = kHeadKv;
    d.head_dim = kHeadDim;
    d.n_ctx = kCtx;
    d.scale = 1.0f / std::sqrt(float(kHeadDim));
    d.only_newest_row_fresh = true;  // as in the model: the QKV projection appends the newest row
    return d;
  }

  // One decode step with plain ops: the token at `token`, logits to `logits`, the next token to
  // `next` (all backend memory).
  void step_unfused(const int32_t* token, float* logits, int32_t* next) {
    EmbeddingDesc e;
    e.table = embd_.get();
    e.ids = token;
    e.out = x_.as<float>();
    be().embedding(e);
    for (Layer& l : layer_) {
      be().rmsnorm(norm(l.attn_norm, xn_.as<half_t>()));
      MatmulDesc qkv = mm(l.qkv.get(), xn_.as<half_t>(), qkv_.as<float>());
      qkv.bias = l.qkv_bias.as<float>();
      be().matmul_m1(qkv);
      RopeDesc r;
      r.pos = pos_.as<int32_t>();
      r.head_dim = kHeadDim;
      r.theta = kTheta;
      r.mode = RopeMode::Neox;
      r.x = qkv_.as<float>();
      r.n_heads = kHead;
      be().rope(r);
      r.x = qkv_.as<float>() + kQDim;
      r.n_heads = kHeadKv;
      be().rope(r);
      KvAppendDesc kv;
      kv.k = qkv_.as<float>() + kQDim;
      kv.v = qkv_.as<float>() + kQDim + kKvDim;
      kv.k_cache = l.k_cache.as<half_t>();
      kv.v_cache = l.v_cache.as<half_t>();
      kv.pos = pos_.as<int32_t>();
      kv.n_head_kv = kHeadKv;
      kv.head_dim = kHeadDim;
      kv.n_ctx = kCtx;
      be().kv_append(kv);
      be().attention_decode(attention(l));
      be().matmul_m1(mm(l.o.get(), att_.as<half_t>(), x_.as<float>(), true));
      be().rmsnorm(norm(l.ffn_norm, xn_.as<half_t>()));
      be().matmul_m1(mm(l.gate.get(), xn_.as<half_t>(), gate_.as<float>()));
      be().matmul_m1(mm(l.up.get(), xn_.as<half_t>(), up_.as<float>()));
      SiluMulDesc s;
      s.gate = gate_.as<float>();
      s.up = up_.as<float>();
      s.out = xn_.as<half_t>();
      s.n = kFf;
      be().silu_mul(s);
      be().matmul_m1(mm(l.down.get(), xn_.as<half_t>(), x_.as<float>(), true));
    }
    be().rmsnorm(norm(out_norm_, xn_.as<half_t>()));
    be().matmul_m1(mm(output_.get(), xn_.as<half_t>(), logits));
    ArgmaxDesc a;
    a.x = logits;
    a.out = next;
    a.n = kVocab;
    be().argmax(a);
  }

  // The same step with the fused forms.
  void step_fused(const int32_t* token, float* logits, int32_t* next) {
    EmbeddingDesc e;
    e.table = embd_.get();
    e.ids = token;
    e.out = x_.as<float>();
    be().embedding(e);
    for (Layer& l : layer_) {
      MatmulDesc qkv = mm(l.qkv.get(), nullptr, qkv_.as<float>());
      qkv.bias = l.qkv_bias.as<float>();
      qkv.norm_x = x_.as<float>();
      qkv.norm_weight = l.attn_norm.as<float>();
      qkv.norm_eps = kEps;
      qkv.epilogue = MatmulEpilogue::QkvRopeAppend;
      qkv.rope.pos = pos_.as<int32_t>();
      qkv.rope.k_cache = l.k_cache.as<half_t>();
      qkv.rope.v_cache = l.v_cache.as<half_t>();
      qkv.rope.n_head = kHead;
      qkv.rope.n_head_kv = kHeadKv;
      qkv.rope.head_dim = kHeadDim;
      qkv.rope.n_ctx = kCtx;
      qkv.rope.theta = kTheta;
      qkv.rope.mode = RopeMode::Neox;
      be().matmul_m1(qkv);
      AttentionDecodeDesc att = attention(l);
      att.wo = l.o.get();  // the output projection fused in
      att.y = x_.as<float>();
      att.max_n_kv = kCtx;
      be().attention_decode(att);
      MatmulDesc gu = mm(l.gate_up.get(), nullptr, nullptr);
      gu.norm_x = x_.as<float>();
      gu.norm_weight = l.ffn_norm.as<float>();
      gu.norm_eps = kEps;
      gu.epilogue = MatmulEpilogue::SwiGLU;
      gu.out16 = xn_.as<half_t>();
      be().matmul_m1(gu);
      be().matmul_m1(mm(l.down.get(), xn_.as<half_t>(), x_.as<float>(), true));
    }
    MatmulDesc out = mm(output_.get(), nullptr, logits);
    out.norm_x = x_.as<float>();
    out.norm_weight = out_norm_.as<float>();
    out.norm_eps = kEps;
    be().matmul_m1(out);
    ArgmaxDesc a;
    a.x = logits;
    a.out = next;
    a.n = kVocab;
    be().argmax(a);
  }

  void set_position(int pos) {
    const int32_t p = pos, n_kv = pos + 1;
    be().upload(pos_.data(), &p, sizeof p);
    be().upload(n_kv_.data(), &n_kv, sizeof n_kv);
  }

  // Checks the backend's tokens and logits against the reference loop fed the same tokens.
  //
  // Tolerance: 5e-3 of the logits' largest magnitude. The loop rounds to fp16 at eleven points per
  // layer; where a backend's fp32 value lies next to a rounding midpoint it takes the other fp16
  // value (one ULP, 2^-10 relative), which the reference cannot follow, and the difference travels
  // on through the layers and steps (the CPU backend ends up at about 1e-3 of that magnitude).
  // Ordering or stale-value faults move the logits by their own order of magnitude. The greedy
  // token of each step must be the argmax of the backend's own logits exactly, and a top logit of
  // the reference to within twice the tolerance.
  void check(const std::vector<int32_t>& tokens, const std::vector<float>& logits) {
    for (int32_t t : tokens) ASSERT_TRUE(t >= 0 && t < kVocab) << "token " << t << " out of range";
    const std::vector<double> want = reference_logits(w_, tokens);
    double scale = 0;
    for (double v : want) scale = std::max(scale, std::fabs(v));
    const double tol = 5e-3 * scale;
    EXPECT_TRUE(all_close(logits, want, bound(want, tol, 0.0)));
    for (int s = 0; s < kSteps; ++s) {
      const std::vector<float> step(logits.begin() + s * kVocab, logits.begin() + (s + 1) * kVocab);
      const std::vector<double> ref_step(want.begin() + s * kVocab, want.begin() + (s + 1) * kVocab);
      EXPECT_EQ(tokens[size_t(s + 1)], ref::argmax(step)) << "step " << s;
      const double ref_max = *std::max_element(ref_step.begin(), ref_step.end());
      EXPECT_GE(ref_step[size_t(tokens[size_t(s + 1)])], ref_max - 2 * tol) << "step " << s;
    }
  }

  Weights w_;
  std::unique_ptr<Matrix> embd_, output_;
  Buffer out_norm_;
  Layer layer_[kLayers];
  Buffer x_;          // (kEmbd) residual stream
  Buffer xn_;         // (max(kEmbd, kFf)) fp16 matmul input
  Buffer qkv_;        // (kQkvDim)
  Buffer att_;        // (kQDim) fp16 attention output
  Buffer gate_, up_;  // (kFf)
  Buffer pos_, n_kv_; // scalars
};
TLLM_OPS_INSTANTIATE(DecodeStepTest);

constexpr int32_t kFirstToken = 17;

// Every step's logits and token go to their own slots; nothing is read back until the end.
TEST_P(DecodeStepTest, Unfused) {
  Buffer tokens = upload(std::vector<int32_t>(kSteps + 1, kFirstToken));
  Buffer logits = alloc<float>(size_t(kSteps) * kVocab);
  for (int s = 0; s < kSteps; ++s) {
    set_position(s);
    step_unfused(tokens.as<int32_t>() + s, logits.as<float>() + s * kVocab, tokens.as<int32_t>() + s + 1);
  }
  check(download<int32_t>(tokens), download<float>(logits));
}

// Fixed buffers, as a captured step needs: the token slot is read by the embedding and written by
// the argmax of the same step; position and n_kv change through uploads between steps.
TEST_P(DecodeStepTest, FusedInRunStep) {
  Buffer token = upload(std::vector<int32_t>{kFirstToken});
  Buffer logits = alloc<float>(kVocab);
  std::vector<int32_t> tokens = {kFirstToken};
  std::vector<float> all_logits;
  be().reset_steps();
  for (int s = 0; s < kSteps; ++s) {
    set_position(s);
    be().run_step(1, 1, [&] { step_fused(token.as<int32_t>(), logits.as<float>(), token.as<int32_t>()); });
    const std::vector<float> l = download<float>(logits);
    all_logits.insert(all_logits.end(), l.begin(), l.end());
    tokens.push_back(download<int32_t>(token)[0]);
  }
  be().reset_steps();
  check(tokens, all_logits);
}

}  // namespace
}  // namespace tllm::test
