// The host's read bandwidth, measured (Backend::measure_read_bandwidth) through the loop the CPU ops
// run on (parallel_for): the buffer is cut into 1 MiB pieces, each folded into one word by XOR, and
// the words are compared with a value the buffer's contents cannot produce, so no read can be
// dropped. The buffer is filled by the same loop first, so that each piece's pages lie where a
// thread that reads it touched them.
#include <algorithm>
#include <chrono>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend_impl.h"

namespace tllm::cpu {
namespace {

constexpr int64_t kPieceWords = (int64_t(1) << 20) / sizeof(uint64_t);  // 1 MiB of uint64_t
constexpr uint64_t kFill = 0x5a5a5a5a5a5a5a5aull;
constexpr uint64_t kNever = ~uint64_t(0);  // a piece of kFill words folds to 0 or to kFill, never to this

}  // namespace

double CpuBackend::measure_read_bandwidth(size_t bytes, int passes) {
  if (bytes < 4096) throw BackendError("cpu backend: measure_read_bandwidth: the buffer must be at least 4096 bytes");
  if (passes < 1) throw BackendError("cpu backend: measure_read_bandwidth: at least one timed pass");
  const int64_t words = int64_t(bytes / sizeof(uint64_t));
  std::unique_ptr<uint64_t[]> buffer(new (std::nothrow) uint64_t[size_t(words)]);
  if (!buffer) {
    throw BackendError("cpu backend: measure_read_bandwidth: cannot allocate " + std::to_string(bytes) + " bytes");
  }
  const int64_t pieces = (words + kPieceWords - 1) / kPieceWords;
  uint64_t* const data = buffer.get();
  parallel_for(pieces, [&](int64_t p) {
    std::fill(data + p * kPieceWords, data + std::min(words, (p + 1) * kPieceWords), kFill);
  });
  std::vector<uint64_t> folded(size_t(pieces), 0);
  double best = 0;
  for (int pass = 0; pass <= passes; ++pass) {  // pass 0 is untimed
    const auto t0 = std::chrono::steady_clock::now();
    parallel_for(pieces, [&](int64_t p) {
      uint64_t acc = 0;
      const uint64_t* const end = data + std::min(words, (p + 1) * kPieceWords);
      for (const uint64_t* w = data + p * kPieceWords; w < end; ++w) acc ^= *w;
      folded[size_t(p)] = acc;
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (std::find(folded.begin(), folded.end(), kNever) != folded.end()) {
      throw BackendError("cpu backend: measure_read_bandwidth: the buffer changed while it was read");
    }
    if (pass > 0 && s > 0) best = std::max(best, double(words) * sizeof(uint64_t) / s / 1e9);
  }
  return best;
}

}  // namespace tllm::cpu
