// Qwen2 and Llama decoder-only transformers running on a Backend.
//
// Model::load reads the hyper-parameters from GGUF metadata, checks every tensor the architecture
// needs (name, shape, type), requantises the layer matrices to W8A16 and keeps the output matrix as
// FP16 (`lm_head`, shared with the token embedding when the model ties them; with an int8 form
// where the file's type is quantised, convert_lm_head), and allocates the KV cache and every
// activation buffer once. After that, prefill and decode allocate nothing.
//
// One layer, as the backend sees it (m rows; decode is m = 1):
//   qkv   = [rmsnorm(x)] · W_qkvᵀ + b_qkv        matmul with rmsnorm prologue, Q/K/V stacked
//   rope(q, k); cache ← k, v                     qkv_rope_append
//   attn  = softmax(q kᵀ · scale) v              attention_prefill / attention_decode (GQA)
//   x    += attn · W_oᵀ                          matmul, accumulate
//   ffn   = silu([rmsnorm(x)]·W_gateᵀ) * (·W_upᵀ) matmul with rmsnorm prologue + SwiGLU epilogue
//   x    += ffn · W_downᵀ                        matmul, accumulate
// and at the end logits = [rmsnorm(x)] · lm_headᵀ. Heads are head_dim wide (attention.key_length
// where the file gives it), so q and attn hold n_head·head_dim values, which need not be n_embd.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/gguf.h"

namespace tllm {

class ModelError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ModelConfig {
  std::string arch;        // "qwen2" or "llama"
  std::string name;        // general.name, if any
  int n_layer = 0;
  int n_embd = 0;
  int n_ff = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;        // attention.key_length (= value_length), or n_embd / n_head without it
  int n_vocab = 0;
  // Context length the model was trained for; with YaRN, its original context times the factor
  // where that is longer (the context the scaling is for).
  int n_ctx_train = 0;
  float rope_theta = 10000.0f;
  // Rope scaling: pair j's frequency theta^(-2j/head_dim) is divided by rope_freq_factors[j], the
  // product of Llama 3's rope_freqs.weight and the divisor of rope.scaling.type (linear: the
  // factor; yarn: from 1 to the factor along the pairs, see YarnRamp). Empty: no scaling.
  std::vector<float> rope_freq_factors;  // (head_dim/2) or empty
  // "" (none), "linear", "yarn" or "rope_freqs", or "linear + rope_freqs", "yarn + rope_freqs"
  std::string rope_scaling;
  // What rope scaling multiplies the rotated q and k by: YaRN's 1 + 0.1 ln(factor) times
  // rope.scaling.attn_factor. Attention's logits take its square.
  float rope_attn_scale = 1.0f;
  float rms_eps = 1e-6f;
  RopeMode rope_mode = RopeMode::Normal;
  bool tied_embeddings = false;  // no output.weight: lm_head is token_embd
  // The lm_head's fp16 values come with an int8 form (lm_head_has_int8_form of its type), which a
  // backend may keep instead of them.
  bool lm_head_int8_form = false;
  bool qkv_bias = false;
  // q and the attention output: need not be n_embd (Mistral-Nemo: 4096 of n_embd 5120).
  int q_dim() const { return n_head * head_dim; }
  int qkv_dim() const { return (n_head + 2 * n_head_kv) * head_dim; }
  int kv_dim() const { return n_head_kv * head_dim; }
};

// Rope scaling asked for when loading, over the file's rope.scaling.* keys (llama.cpp's
// --rope-scaling, --rope-scale and --yarn-orig-ctx): what is left unset keeps the file's value. A
// file's rope_freqs.weight and rope.scaling.attn_factor apply in any case.
struct RopeScalingOverride {
  std::string type;          // "", or "none", "linear", "yarn"
  double factor = 0.0;       // rope.scaling.factor; 0: the file's
  int original_context = 0;  // rope.scaling.original_context_length (yarn); 0: the file's
};

// Reads and checks the hyper-parameters. Throws ModelError("<file>: <problem>").
ModelConfig read_model_config(const GgufFile& f, const RopeScalingOverride& rope = {});

// How YaRN splits a head's rotation pairs, as llama.cpp computes it (its "correction dims"): pair j
// turns (theta^(-2j/head_dim) radians a position) over the original context about
// original / (2 pi theta^(2j/head_dim)) times. Pairs up to `low`, the last that turns at least
// kYarnBetaFast times, keep their frequency; pairs from `high`, the first that turns under
// kYarnBetaSlow times, are divided by the factor; between them the share kept falls linearly.
constexpr float kYarnBetaFast = 32.0f;
constexpr float kYarnBetaSlow = 1.0f;
struct YarnRamp {
  float low = 0.0f;
  float high = 0.0f;
  // The share of pair j's frequency that is kept rather than divided by the factor: 1 up to low,
  // 0 from high on.
  double extrapolated_share(int j) const;
};
YarnRamp yarn_ramp(int head_dim, int original_context, float rope_theta);

struct LoadOptions {
  int n_ctx = 4096;        // KV cache rows; capped at the model's training context
  int max_batch = 512;     // prompt rows processed per prefill chunk
  RopeScalingOverride rope;  // over the file's rope scaling
  // Called as tensors are converted: (done, total) in tensors.
  std::function<void(size_t done, size_t total)> progress;
};

// Bytes a model will hold on a backend, computed before anything is allocated: what load()
// allocates, to the byte (the backend's own workspaces aside).
struct ModelFootprint {
  size_t weight_bytes = 0;       // matrices in the backend's layout (Backend::matrix_bytes) + norms and biases
  size_t kv_cache_bytes = 0;     // K and V, all layers, n_ctx rows, fp16
  size_t activation_bytes = 0;   // prefill chunk buffers, logits, step scalars
  size_t total() const { return weight_bytes + kv_cache_bytes + activation_bytes; }
};

// Why a model with this footprint cannot be loaded on a device with this memory (sizes named), or ""
// when it fits. A device that reports no total (device_total = 0) is not checked.
std::string fit_error(const ModelFootprint& need, const MemoryInfo& mem, const std::string& device, int n_ctx);

class Model {
 public:
  // Loads `f` onto `backend`. Throws ModelError (bad model) or BackendError (does not fit, or heads
  // wider than the backend's max_head_dim()).
  static std::unique_ptr<Model> load(const GgufFile& f, Backend& backend, const LoadOptions& opt);
  // What load() would allocate on `backend`, for checking against the device's free memory first.
  static ModelFootprint footprint(const ModelConfig& c, const LoadOptions& opt, const Backend& backend);
  ~Model();

  const ModelConfig& config() const { return cfg_; }
  Backend& backend() { return be_; }
  int n_ctx() const { return n_ctx_; }
  int max_batch() const { return max_batch_; }
  const ModelFootprint& footprint() const { return footprint_; }

  // Runs tokens [0, n) at positions pos0 .. pos0+n-1 (the cache must already hold 0 .. pos0-1),
  // in chunks of max_batch rows. Leaves the logits of the last token in logits(). When
  // `all_logits` is given it is called with (row index, logits of that row, n_vocab) for every row.
  // Without it, a prompt of up to kPrefillRecordRows tokens in one chunk is recorded (run_step, one
  // CUDA graph per length) the second time its length comes, and replayed from then on.
  void prefill(const int32_t* tokens, int n, int pos0,
               const std::function<void(int, const float*, int)>& all_logits = {});
  // Runs one token at position pos (cache holds 0 .. pos-1). A backend with step capture records
  // this once and replays it.
  void decode(int32_t token, int pos);

  // Logits of the last token run, fp32 (n_vocab), in backend memory.
  const float* logits() const { return logits_.as<float>(); }
  void download_logits(float* dst);   // (n_vocab)
  // argmax of logits() (first index on ties), computed by the lm_head matmul's argmax epilogue:
  // greedy decoding downloads one token id, not the logits. After a prefill that download is
  // already queued behind the lm_head, so the first token reaches the host without another trip.
  int32_t argmax();

  // Greedy decoding without waiting for the host between steps (GreedyRuns drives it).
  // decode_run(pos, n) queues n steps at pos .. pos + n - 1 (1 <= n <= kDecodeRunMax, inside the
  // context) as one unit (one CUDA graph per n): the first takes the argmax of the step before it
  // (prefill, decode or decode_run), which only the device knows yet, and each next one the argmax
  // of the one before, so the device goes from step to step without the host. A run right after a
  // step at pos - 1 uploads nothing: that step advanced the position. queue_run_tokens(n) queues
  // the download of the last run's n argmaxes and take_run_tokens(ticket, n, out) waits for it and
  // writes them to out, in order. So a run can be queued before the host reads the tokens of the
  // one before.
  // 16 steps: on an H200, decode 2,334–2,336 against 2,325–2,331 tok/s for runs of 8 (interleaved);
  // a run length's first use records twice the kernels of a run of 8.
  static constexpr int kDecodeRunMax = 16;
  static_assert(kDecodeRunMax * sizeof(int32_t) <= kQueuedDownloadBytes,
                "a run's tokens come back in one queued download (queue_run_tokens)");
  // Decode runs are recorded per context class: the cache rows a run ends within, kShortDecodeRows
  // for class 0 and doubling with each class up to n_ctx (run_step key class · kDecodeRunMax + n).
  // Steps tell attention_decode their class's bound (max_n_kv), so that a backend may take a form
  // that pays off only on shorter caches (CUDA: attention and the output projection in one kernel,
  // its blocks splitting the rows of up to 1,024 at head_dim 64).
  static constexpr int kShortDecodeRows = 256;
  void decode_run(int pos, int n);
  uint64_t queue_run_tokens(int n);
  void take_run_tokens(uint64_t ticket, int n, int32_t* out);
  // Decode steps queued since load (decode and decode_run): a clock for checks of what a timed
  // span covers (GenerateOptions::clock_ms).
  uint64_t decode_steps_queued() const { return decode_steps_queued_; }

  // Per decode step: bytes of weights streamed (every matrix once + lm_head) and the KV bytes read
  // at context length n_kv.
  size_t decode_weight_bytes() const;
  size_t decode_kv_bytes(int n_kv) const;
  // Kernels' view of the decode GEMMs: name, n, k, weight type (for the profiler's GEMM table).
  struct GemmShape {
    std::string name;
    int64_t n, k;
    WeightType type;
    size_t bytes;  // what a decode step reads of the matrix (layer 0's; Matrix::stream_bytes)
  };
  std::vector<GemmShape> decode_gemms() const;

 private:
  struct Layer;
  Model(Backend& be, ModelConfig cfg);
  // The layer stack over m rows of x_. Decode steps (m = 1) take the GEMV path; with
  // `last_row_out`, the last layer computes everything after its QKV projection (which fills the
  // KV cache for all m rows) for the last row only, the only one the lm_head reads. `recorded`: the
  // ops are being recorded for replays at other positions, so attention takes pos0 from pos.
  // Decode steps tell attention_decode to expect at most max_n_kv cache rows (0: n_ctx).
  void run_layers(int m, const int32_t* pos, const int32_t* n_kv, int32_t pos0, bool decode,
                  bool last_row_out = false, bool recorded = false, int max_n_kv = 0);
  void run_decode_steps(int pos, int n);
  void check_position(int pos) const;
  // A prefill chunk's pieces: its m token ids, then its positions pos0 .. pos0 + m - 1, into out (the
  // layout of prompt_) and into prompt_; the embedding
  // (ids from the host, which then also writes the positions, or, with host_ids null, from
  // prompt_); the lm_head of row i of x_ with its argmax into step_.
  static void fill_prompt(int32_t* out, const int32_t* tokens, int m, int pos0);
  void upload_prompt(const int32_t* tokens, int m, int pos0);
  void embed_chunk(const int32_t* host_ids, int m, int pos0);
  void lm_head_row(int i);

  // Prompts of up to kPrefillRecordRows tokens are recorded per length (prefill), under run_step
  // keys kPrefillStepKey - n (decode runs take positive keys); prefill_seen_[n] counts the
  // prompts of length n so far, up to 2.
  static constexpr int kPrefillRecordRows = 64;
  static_assert(2 * kPrefillRecordRows * sizeof(int32_t) <= kStagingBytes, "ids and positions fit the staging area");
  static constexpr int kPrefillStepKey = -1000;
  std::array<uint8_t, kPrefillRecordRows + 1> prefill_seen_{};

  Backend& be_;
  ModelConfig cfg_;
  int n_ctx_ = 0;
  int max_batch_ = 0;
  ModelFootprint footprint_;

  std::vector<std::unique_ptr<Layer>> layers_;
  std::unique_ptr<Matrix> lm_head_;     // (n_vocab, n_embd) F16, int8 form where quantised
  std::unique_ptr<Matrix> embd_;        // (n_vocab, n_embd) W8; null when tied (lm_head used)
  Buffer output_norm_;                  // (n_embd) f32
  Buffer rope_factors_;                 // (head_dim/2) f32: cfg_.rope_freq_factors; empty without scaling

  // Activations, sized for max_batch rows at load time.
  Buffer x_;          // (max_batch, n_embd) f32 residual stream
  Buffer qkv_;        // (max_batch, (n_head + 2·n_head_kv)·head_dim) f32
  Buffer attn_;       // (max_batch, n_head·head_dim) f16 attention output
  Buffer ffn_;        // (max_batch, n_ff) f16 SwiGLU output
  Buffer prompt_;     // (2 · max_batch) i32: a prefill chunk's m token ids (when uploaded), then its m positions
  Buffer logits_;     // (n_vocab) f32
  // i32 [pos, n_kv, t0 .. t(kDecodeRunMax - 1)]: the decode steps' scalars. Step j of a run of n
  // reads its token from t(j) and writes its argmax to t(j + 1), the last one to t0, which is where
  // a single step reads and writes it.
  Buffer step_;
  int32_t* token_slots() const { return step_.as<int32_t>() + 2; }  // t0 of step_
  bool argmax_ready_ = false;  // a step has written its argmax to step_
  // The download of the prompt's argmax, queued right behind the prefill's lm_head so that argmax()
  // finds it on the host; 0 when none is outstanding (drop_argmax_download collects it).
  uint64_t argmax_ticket_ = 0;
  bool argmax_readback_ = false;  // a recorded prefill copied its argmax to the backend's readback()
  void drop_argmax_download();
  // The position step_ will hold for the next decode step, or -1: a decode step's argmax advances
  // [pos, n_kv] by one on the device, so a step that continues from the last one uploads nothing.
  int next_step_pos_ = -1;
  uint64_t decode_steps_queued_ = 0;
};

}  // namespace tllm
