// GGUF v2/v3 files: a validating reader over a read-only memory map, and a writer.
//
// The reader checks every count, length, offset, dimension and type it reads against the file before
// using it (overflow-safe arithmetic), so a crafted or truncated file yields a GgufError whose
// one-line message names the file and the problem, never a crash. Tensor data is not copied: each
// TensorInfo points into the map, which lives as long as the GgufFile.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace tllm {

class GgufError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// ggml tensor types, numbered as in the GGUF specification.
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
};

// GGUF metadata value types.
enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};

const char* ggml_type_name(GgmlType t);
const char* gguf_type_name(GgufType t);  // "u8", "string", "array", ...
// Values per block and bytes per block; false for a type this project does not know.
bool ggml_type_block(GgmlType t, int64_t* block_values, int64_t* block_bytes);

// One metadata value. Scalars are widened (integers to int64/uint64, floats to double); arrays keep
// their element type and are held in `arr` (strings in `strs` for string arrays, for speed with
// 150k-entry vocabularies).
struct GgufValue {
  GgufType type = GgufType::U8;
  GgufType elem_type = GgufType::U8;  // for ARRAY
  int64_t i = 0;                      // signed integer types and BOOL (and unsigned ones that fit)
  uint64_t u = 0;                     // unsigned integer types (and non-negative signed ones, BOOL)
  double f = 0;                       // F32, F64
  std::string str;                    // STRING
  std::vector<GgufValue> arr;         // ARRAY of non-string values
  std::vector<std::string> strs;      // ARRAY of STRING
  size_t array_size() const;
  // Human-readable short form for `inspect` (arrays summarised).
  std::string to_string() const;
};

struct TensorInfo {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> dims;   // GGUF order: dims[0] is the fastest-varying (row length)
  uint64_t offset = 0;         // relative to the data section
  const uint8_t* data = nullptr;  // into the map
  size_t bytes = 0;
  int64_t n_elements() const;
  int64_t rows() const;        // product of dims[1..]
};

class GgufFile {
 public:
  // Maps and validates `path`. Throws GgufError("<path>: <problem>").
  static std::unique_ptr<GgufFile> open(const std::string& path);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  size_t file_size() const { return size_; }

  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(const std::string& key) const;
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(const std::string& name) const;

  // Typed getters: throw GgufError naming the file and key when missing or of the wrong type.
  std::string get_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;              // any integer type
  double get_float(const std::string& key) const;             // F32/F64 (or an integer)
  // Same, with a default when the key is absent (still an error when present with a wrong type).
  std::string get_string(const std::string& key, const std::string& def) const;
  int64_t get_int(const std::string& key, int64_t def) const;
  double get_float(const std::string& key, double def) const;
  bool get_bool(const std::string& key, bool def) const;
  const std::vector<std::string>& get_string_array(const std::string& key) const;
  // Numeric array as doubles / int64s (any numeric element type).
  std::vector<double> get_float_array(const std::string& key) const;
  std::vector<int64_t> get_int_array(const std::string& key) const;

 private:
  GgufFile() = default;
  std::string path_;
  int fd_ = -1;
  const uint8_t* map_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
  friend class GgufParser;
};

// Builds a GGUF file (version 3 unless set_version(2)): metadata first, then tensors, written with `general.alignment` padding.
// Tensor bytes are appended through a callback so a 400 MB file is never held in memory twice.
class GgufWriter {
 public:
  // Metadata, in the order first set; setting a key again replaces its value in place.
  // `general.alignment` must be a u32 power of two: it sets the alignment the file is written with
  // (32 without it). Throws GgufError for a value that cannot be written.
  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_u64(const std::string& key, uint64_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, const std::string& v);
  void set_string_array(const std::string& key, const std::vector<std::string>& v);
  void set_i32_array(const std::string& key, const std::vector<int32_t>& v);
  void set_f32_array(const std::string& key, const std::vector<float>& v);
  // Generic escape hatch for tests that need exotic values (any type, nested arrays).
  void set_value(const std::string& key, const GgufValue& v);
  // GGUF version written: 3 (default) or 2, whose layout is the same for little-endian files.
  void set_version(uint32_t version);

  // Declares a tensor; `dims` in GGUF order (dims[0] = row length). Its bytes must be produced by
  // the `fill` callback of write(), in declaration order. Throws GgufError for a repeated name, an
  // unknown type, 0 or more than 4 dims, a dim <= 0, or a row length that is not whole blocks.
  void add_tensor(const std::string& name, GgmlType type, const std::vector<int64_t>& dims);

  // Writes the file. For each declared tensor in order, calls fill(index, dst, bytes) to produce its
  // data (an empty `fill` writes zeros); `progress(done_bytes, total_bytes)` is called as data is
  // written. The file is written as `path`.tmp and renamed when complete. Throws GgufError on I/O
  // failure, and before writing anything when `path` exists and is not a regular file (a device or
  // a pipe, which the rename would replace); exceptions from `fill` propagate. Either way no file
  // is left behind.
  using FillFn = std::function<void(size_t index, uint8_t* dst, size_t bytes)>;
  using ProgressFn = std::function<void(size_t done, size_t total)>;
  void write(const std::string& path, const FillFn& fill, const ProgressFn& progress = {}) const;

  size_t tensor_bytes(size_t index) const;
  size_t n_tensors() const { return tensors_.size(); }

 private:
  struct PendingTensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> dims;
  };
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<PendingTensor> tensors_;
  uint32_t alignment_ = 32;
  uint32_t version_ = 3;
};

}  // namespace tllm
