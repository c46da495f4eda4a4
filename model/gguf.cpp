// GGUF reader: maps the file read-only and validates every field before it is used.
//
// Layout (all little-endian): "GGUF" | u32 version | u64 n_tensors | u64 n_kv | n_kv key/value pairs
// | n_tensors tensor infos | padding to the alignment | tensor data. A string is u64 length + bytes;
// a value is u32 type + payload; an array is u32 element type + u64 count + elements. A tensor info
// is name | u32 n_dims | u64 dims[n_dims] | u32 ggml type | u64 offset (relative to the data
// section, a multiple of the alignment).
#include "model/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <limits>

namespace tllm {

const char* ggml_type_name(GgmlType t) {
  switch (static_cast<uint32_t>(t)) {
    case 0: return "F32";
    case 1: return "F16";
    case 2: return "Q4_0";
    case 3: return "Q4_1";
    case 6: return "Q5_0";
    case 7: return "Q5_1";
    case 8: return "Q8_0";
    case 9: return "Q8_1";
    case 10: return "Q2_K";
    case 11: return "Q3_K";
    case 12: return "Q4_K";
    case 13: return "Q5_K";
    case 14: return "Q6_K";
    case 15: return "Q8_K";
    case 16: return "IQ2_XXS";
    case 17: return "IQ2_XS";
    case 18: return "IQ3_XXS";
    case 19: return "IQ1_S";
    case 20: return "IQ4_NL";
    case 21: return "IQ3_S";
    case 22: return "IQ2_S";
    case 23: return "IQ4_XS";
    case 29: return "IQ1_M";
    case 30: return "BF16";
    case 34: return "TQ1_0";
    case 35: return "TQ2_0";
    // Types ggml defines that this project does not read; named for error messages.
    case 24: return "I8";
    case 25: return "I16";
    case 26: return "I32";
    case 27: return "I64";
    case 28: return "F64";
    case 39: return "MXFP4";
  }
  return "unknown";
}

bool ggml_type_block(GgmlType t, int64_t* block_values, int64_t* block_bytes) {
  int64_t v = 0, b = 0;
  switch (t) {
    case GgmlType::F32: v = 1, b = 4; break;
    case GgmlType::F16: v = 1, b = 2; break;
    case GgmlType::BF16: v = 1, b = 2; break;
    case GgmlType::Q4_0: v = 32, b = 2 + 16; break;
    case GgmlType::Q4_1: v = 32, b = 2 + 2 + 16; break;
    case GgmlType::Q5_0: v = 32, b = 2 + 4 + 16; break;
    case GgmlType::Q5_1: v = 32, b = 2 + 2 + 4 + 16; break;
    case GgmlType::Q8_0: v = 32, b = 2 + 32; break;
    case GgmlType::Q8_1: v = 32, b = 2 + 2 + 32; break;
    case GgmlType::Q2_K: v = 256, b = 16 + 64 + 2 + 2; break;
    case GgmlType::Q3_K: v = 256, b = 32 + 64 + 12 + 2; break;
    case GgmlType::Q4_K: v = 256, b = 2 + 2 + 12 + 128; break;
    case GgmlType::Q5_K: v = 256, b = 2 + 2 + 12 + 32 + 128; break;
    case GgmlType::Q6_K: v = 256, b = 128 + 64 + 16 + 2; break;
    case GgmlType::Q8_K: v = 256, b = 4 + 256 + 32; break;
    case GgmlType::IQ4_NL: v = 32, b = 2 + 16; break;
    case GgmlType::IQ4_XS: v = 256, b = 2 + 2 + 4 + 128; break;
    case GgmlType::IQ2_XXS: v = 256, b = 2 + 64; break;
    case GgmlType::IQ2_XS: v = 256, b = 2 + 64 + 8; break;
    case GgmlType::IQ2_S: v = 256, b = 2 + 32 + 32 + 8 + 8; break;
    case GgmlType::IQ3_XXS: v = 256, b = 2 + 64 + 32; break;
    case GgmlType::IQ3_S: v = 256, b = 2 + 64 + 8 + 32 + 4; break;
    case GgmlType::IQ1_S: v = 256, b = 2 + 32 + 16; break;
    case GgmlType::IQ1_M: v = 256, b = 32 + 16 + 8; break;
    case GgmlType::TQ1_0: v = 256, b = 48 + 4 + 2; break;
    case GgmlType::TQ2_0: v = 256, b = 64 + 2; break;
    default: return false;
  }
  if (block_values) *block_values = v;
  if (block_bytes) *block_bytes = b;
  return true;
}

// ---- values ----------------------------------------------------------------------------------

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::U8: return "u8";
    case GgufType::I8: return "i8";
    case GgufType::U16: return "u16";
    case GgufType::I16: return "i16";
    case GgufType::U32: return "u32";
    case GgufType::I32: return "i32";
    case GgufType::F32: return "f32";
    case GgufType::BOOL: return "bool";
    case GgufType::STRING: return "string";
    case GgufType::ARRAY: return "array";
    case GgufType::U64: return "u64";
    case GgufType::I64: return "i64";
    case GgufType::F64: return "f64";
  }
  return "unknown";
}

namespace {

bool known_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::F64); }

bool is_signed_int(GgufType t) {
  return t == GgufType::I8 || t == GgufType::I16 || t == GgufType::I32 || t == GgufType::I64;
}
bool is_unsigned_int(GgufType t) {
  return t == GgufType::U8 || t == GgufType::U16 || t == GgufType::U32 || t == GgufType::U64;
}
bool is_float(GgufType t) { return t == GgufType::F32 || t == GgufType::F64; }

// Fewest bytes one value of type `t` takes in the file (for plausibility checks of array counts).
uint64_t min_encoded_size(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    case GgufType::STRING: return 8;        // length
    case GgufType::ARRAY: return 4 + 8;     // element type + count
  }
  return 1;
}

std::string quote(const std::string& s, size_t max_chars) {
  std::string out = "\"";
  size_t n = 0;
  for (char c : s) {
    if (n++ == max_chars) {
      out += "...\" (" + std::to_string(s.size()) + " bytes)";
      return out;
    }
    switch (c) {
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

// `s` with bytes below 0x20 and 0x7F written as \xNN.
std::string escape_controls(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

std::string format_double(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.7g", v);
  return buf;
}

}  // namespace

size_t GgufValue::array_size() const {
  return elem_type == GgufType::STRING ? strs.size() : arr.size();
}

std::string GgufValue::to_string() const {
  constexpr size_t kShownItems = 5;
  switch (type) {
    case GgufType::U8: case GgufType::U16: case GgufType::U32: case GgufType::U64:
      return std::to_string(u);
    case GgufType::I8: case GgufType::I16: case GgufType::I32: case GgufType::I64:
      return std::to_string(i);
    case GgufType::F32: case GgufType::F64:
      return format_double(f);
    case GgufType::BOOL:
      return i ? "true" : "false";
    case GgufType::STRING:
      return quote(str, 80);
    case GgufType::ARRAY: {
      const size_t n = array_size();
      std::string out = "[" + std::string(gguf_type_name(elem_type)) + " x " + std::to_string(n) + "]";
      if (n == 0) return out;
      out += " [";
      for (size_t k = 0; k < n && k < kShownItems; ++k) {
        if (k) out += ", ";
        out += elem_type == GgufType::STRING ? quote(strs[k], 24) : arr[k].to_string();
      }
      return out + (n > kShownItems ? ", ...]" : "]");
    }
  }
  return "?";
}

int64_t TensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

int64_t TensorInfo::rows() const {
  int64_t n = 1;
  for (size_t k = 1; k < dims.size(); ++k) n *= dims[k];
  return n;
}

// ---- parser ----------------------------------------------------------------------------------

class GgufParser {
 public:
  explicit GgufParser(GgufFile& f) : f_(f), base_(f.map_), size_(f.size_) {}

  void parse() {
    parse_header();
    for (uint64_t k = 0; k < n_kv_; ++k) parse_kv(k);
    read_alignment();
    for (uint64_t k = 0; k < n_tensors_; ++k) parse_tensor_info(k);
    place_tensors();
  }

 private:
  static constexpr int kMaxArrayDepth = 4;
  // Arrays of non-string values expand to one GgufValue per element; this caps what a crafted file
  // can make the reader allocate (2^22 values, about 470 MB at most). Real models hold a few hundred
  // thousand such values (token types: one per vocabulary entry).
  static constexpr uint64_t kMaxArrayValues = uint64_t(1) << 22;
  static constexpr size_t kMaxTensorName = 64;  // the GGUF specification's limit

  // Keys and names in `problem` come from the file: control characters are escaped so the
  // message stays one line.
  [[noreturn]] void fail(const std::string& problem) const {
    throw GgufError(f_.path_ + ": " + escape_controls(problem));
  }

  size_t left() const { return size_ - pos_; }

  void need(uint64_t n) const {
    if (n > left()) {
      fail("truncated: " + where_ + " needs " + std::to_string(n) + " bytes at offset " +
           std::to_string(pos_) + " but only " + std::to_string(left()) + " remain");
    }
  }

  template <class T>
  T read() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string() {
    const uint64_t n = read<uint64_t>();
    need(n);
    std::string s(reinterpret_cast<const char*>(base_ + pos_), n);
    pos_ += n;
    return s;
  }

  void parse_header() {
    where_ = "header";
    if (size_ < 4 || std::memcmp(base_, "GGUF", 4) != 0) fail("not a GGUF file (bad magic)");
    pos_ = 4;
    const uint32_t version = read<uint32_t>();
    const uint32_t swapped = __builtin_bswap32(version);
    if (version == 1) fail("GGUF version 1 is not supported (expected version 2 or 3)");
    if (swapped == 2 || swapped == 3) fail("big-endian GGUF files are not supported");
    if (version != 2 && version != 3) {
      fail("unsupported GGUF version " + std::to_string(version) + " (expected 2 or 3)");
    }
    f_.version_ = version;
    n_tensors_ = read<uint64_t>();
    n_kv_ = read<uint64_t>();
    // Each key/value pair takes at least 13 bytes (key length, type, a 1-byte value) and each tensor
    // info at least 32 (name length, n_dims, one dim, type, offset).
    constexpr uint64_t kMinKv = 8 + 4 + 1, kMinTensor = 8 + 4 + 8 + 4 + 8;
    if (n_kv_ > left() / kMinKv) {
      fail("implausible metadata count " + std::to_string(n_kv_) + " for a file of " +
           std::to_string(size_) + " bytes");
    }
    if (n_tensors_ > left() / kMinTensor) {
      fail("implausible tensor count " + std::to_string(n_tensors_) + " for a file of " +
           std::to_string(size_) + " bytes");
    }
    if (n_kv_ * kMinKv + n_tensors_ * kMinTensor > left()) {
      fail("implausible counts: " + std::to_string(n_kv_) + " metadata entries and " +
           std::to_string(n_tensors_) + " tensors do not fit in a file of " + std::to_string(size_) +
           " bytes");
    }
  }

  void parse_kv(uint64_t index) {
    where_ = "metadata entry " + std::to_string(index);
    std::string key = read_string();
    if (key.empty()) fail("metadata entry " + std::to_string(index) + " has an empty key");
    key_ = key;
    where_ = "key '" + key + "'";
    const uint32_t type = read<uint32_t>();
    if (!known_type(type)) fail("key '" + key + "' has unknown value type " + std::to_string(type));
    GgufValue v = read_value(static_cast<GgufType>(type), 0);
    if (f_.kv_index_.count(key)) fail("duplicate key '" + key + "'");
    f_.kv_index_.emplace(key, f_.kv_.size());
    f_.kv_.emplace_back(std::move(key), std::move(v));
  }

  GgufValue read_value(GgufType t, int depth) {
    GgufValue v;
    v.type = t;
    switch (t) {
      case GgufType::U8: set_unsigned(v, read<uint8_t>()); break;
      case GgufType::U16: set_unsigned(v, read<uint16_t>()); break;
      case GgufType::U32: set_unsigned(v, read<uint32_t>()); break;
      case GgufType::U64: set_unsigned(v, read<uint64_t>()); break;
      case GgufType::I8: set_signed(v, read<int8_t>()); break;
      case GgufType::I16: set_signed(v, read<int16_t>()); break;
      case GgufType::I32: set_signed(v, read<int32_t>()); break;
      case GgufType::I64: set_signed(v, read<int64_t>()); break;
      case GgufType::F32: v.f = read<float>(); break;
      case GgufType::F64: v.f = read<double>(); break;
      case GgufType::BOOL: {
        const uint8_t b = read<uint8_t>();
        if (b > 1) fail("key '" + key_ + "': bool value " + std::to_string(b) + " is neither 0 nor 1");
        v.i = b;
        v.u = b;
        break;
      }
      case GgufType::STRING: v.str = read_string(); break;
      case GgufType::ARRAY: read_array(v, depth + 1); break;
    }
    return v;
  }

  static void set_unsigned(GgufValue& v, uint64_t x) {
    v.u = x;
    v.i = x <= uint64_t(std::numeric_limits<int64_t>::max()) ? int64_t(x) : 0;
  }
  static void set_signed(GgufValue& v, int64_t x) {
    v.i = x;
    v.u = x >= 0 ? uint64_t(x) : 0;
  }

  void read_array(GgufValue& v, int depth) {
    if (depth > kMaxArrayDepth) {
      fail("key '" + key_ + "': arrays nested deeper than " + std::to_string(kMaxArrayDepth) + " levels");
    }
    const uint32_t et = read<uint32_t>();
    if (!known_type(et)) {
      fail("key '" + key_ + "': array has unknown element type " + std::to_string(et));
    }
    v.elem_type = static_cast<GgufType>(et);
    const uint64_t n = read<uint64_t>();
    if (n > left() / min_encoded_size(v.elem_type)) {
      fail("key '" + key_ + "': array of " + std::to_string(n) + " " + gguf_type_name(v.elem_type) +
           " values does not fit in the " + std::to_string(left()) + " bytes left");
    }
    if (v.elem_type == GgufType::STRING) {
      v.strs.reserve(n);
      for (uint64_t k = 0; k < n; ++k) v.strs.push_back(read_string());
      return;
    }
    array_values_ += n;
    if (array_values_ > kMaxArrayValues) {
      fail("key '" + key_ + "': metadata arrays hold more than " + std::to_string(kMaxArrayValues) +
           " non-string values in total");
    }
    v.arr.reserve(n);
    for (uint64_t k = 0; k < n; ++k) v.arr.push_back(read_value(v.elem_type, depth));
  }

  void read_alignment() {
    auto it = f_.kv_index_.find("general.alignment");
    if (it == f_.kv_index_.end()) return;
    const GgufValue& v = f_.kv_[it->second].second;
    if (v.type != GgufType::U32) {
      fail(std::string("general.alignment has type ") + gguf_type_name(v.type) + ", expected u32");
    }
    if (v.u == 0 || (v.u & (v.u - 1)) != 0) {
      fail("general.alignment " + std::to_string(v.u) + " is not a power of two");
    }
    f_.alignment_ = v.u;
  }

  void parse_tensor_info(uint64_t index) {
    where_ = "tensor info " + std::to_string(index);
    TensorInfo t;
    t.name = read_string();
    if (t.name.empty()) fail("tensor " + std::to_string(index) + " has an empty name");
    if (t.name.size() > kMaxTensorName) {
      fail("tensor " + std::to_string(index) + " name is " + std::to_string(t.name.size()) +
           " bytes long (at most " + std::to_string(kMaxTensorName) + " allowed)");
    }
    const std::string tn = "tensor '" + t.name + "'";
    where_ = tn;
    const uint32_t n_dims = read<uint32_t>();
    if (n_dims < 1 || n_dims > 4) {
      fail(tn + " has " + std::to_string(n_dims) + " dimensions (expected 1 to 4)");
    }
    uint64_t n = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim = read<uint64_t>();
      if (dim == 0) fail(tn + " dimension " + std::to_string(d) + " is 0");
      if (dim > uint64_t(std::numeric_limits<int64_t>::max()) / n) {
        fail(tn + " element count overflows (dimension " + std::to_string(d) + " is " +
             std::to_string(dim) + ")");
      }
      n *= dim;
      t.dims.push_back(int64_t(dim));
    }
    const uint32_t type = read<uint32_t>();
    t.type = static_cast<GgmlType>(type);
    int64_t bv = 0, bb = 0;
    if (!ggml_type_block(t.type, &bv, &bb)) {
      const char* name = ggml_type_name(t.type);
      if (std::strcmp(name, "unknown") == 0) fail(tn + " has unknown type " + std::to_string(type));
      fail(tn + " has type " + name + " (" + std::to_string(type) + "), which is not supported");
    }
    if (t.dims[0] % bv != 0) {
      fail(tn + " row length " + std::to_string(t.dims[0]) + " is not a multiple of the " +
           ggml_type_name(t.type) + " block size " + std::to_string(bv));
    }
    const uint64_t blocks = n / uint64_t(bv);
    if (blocks > std::numeric_limits<uint64_t>::max() / uint64_t(bb)) fail(tn + " byte size overflows");
    const uint64_t bytes = blocks * uint64_t(bb);
    if (bytes > std::numeric_limits<size_t>::max()) fail(tn + " byte size overflows");
    t.bytes = size_t(bytes);
    t.offset = read<uint64_t>();
    if (t.offset % f_.alignment_ != 0) {
      fail(tn + " offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
           std::to_string(f_.alignment_));
    }
    if (f_.tensor_index_.count(t.name)) fail("duplicate tensor name '" + t.name + "'");
    f_.tensor_index_.emplace(t.name, f_.tensors_.size());
    f_.tensors_.push_back(std::move(t));
  }

  void place_tensors() {
    // pos_ <= size_ < 2^63 and alignment <= 2^32, so this cannot overflow.
    const uint64_t data_start = (uint64_t(pos_) + f_.alignment_ - 1) / f_.alignment_ * f_.alignment_;
    for (TensorInfo& t : f_.tensors_) {
      const bool inside = data_start <= size_ && t.offset <= size_ - data_start &&
                          t.bytes <= size_ - data_start - t.offset;
      if (!inside) {
        const std::string where = t.offset <= size_ ? "offset " + std::to_string(data_start + t.offset)
                                                    : "data-section offset " + std::to_string(t.offset);
        fail("tensor '" + t.name + "' data [" + where + ", " + std::to_string(t.bytes) +
             " bytes] extends past the end of the file (size " + std::to_string(size_) + ")");
      }
      t.data = base_ + data_start + t.offset;
    }
    std::vector<const TensorInfo*> by_offset;
    by_offset.reserve(f_.tensors_.size());
    for (const TensorInfo& t : f_.tensors_) by_offset.push_back(&t);
    std::sort(by_offset.begin(), by_offset.end(),
              [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
    for (size_t k = 1; k < by_offset.size(); ++k) {
      const TensorInfo& a = *by_offset[k - 1];
      const TensorInfo& b = *by_offset[k];
      if (a.offset + a.bytes > b.offset) {
        fail("tensors '" + a.name + "' [offset " + std::to_string(a.offset) + ", " +
             std::to_string(a.bytes) + " bytes] and '" + b.name + "' [offset " +
             std::to_string(b.offset) + ", " + std::to_string(b.bytes) + " bytes] overlap");
      }
    }
  }

  GgufFile& f_;
  const uint8_t* base_;
  size_t size_;
  size_t pos_ = 0;
  uint64_t n_tensors_ = 0, n_kv_ = 0;
  uint64_t array_values_ = 0;
  std::string where_;  // what is being read, for truncation messages
  std::string key_;    // the key whose value is being read
};

// ---- file ------------------------------------------------------------------------------------

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f->fd_ < 0) throw GgufError(path + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (::fstat(f->fd_, &st) != 0) throw GgufError(path + ": cannot stat: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw GgufError(path + ": not a regular file");
  if (st.st_size == 0) throw GgufError(path + ": empty file");
  f->size_ = size_t(st.st_size);
  void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, f->fd_, 0);
  if (p == MAP_FAILED) throw GgufError(path + ": cannot map: " + std::strerror(errno));
  f->map_ = static_cast<const uint8_t*>(p);
  GgufParser(*f).parse();
  return f;
}

GgufFile::~GgufFile() {
  if (map_) ::munmap(const_cast<uint8_t*>(map_), size_);
  if (fd_ >= 0) ::close(fd_);
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const TensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

[[noreturn]] void wrong_type(const std::string& path, const std::string& key, const GgufValue& v,
                             const char* expected) {
  std::string have = gguf_type_name(v.type);
  if (v.type == GgufType::ARRAY) have += std::string(" of ") + gguf_type_name(v.elem_type);
  throw GgufError(path + ": key '" + key + "' has type " + have + ", expected " + expected);
}

int64_t as_int(const std::string& path, const std::string& key, const GgufValue& v) {
  if (is_signed_int(v.type)) return v.i;
  if (is_unsigned_int(v.type)) {
    if (v.u > uint64_t(std::numeric_limits<int64_t>::max())) {
      throw GgufError(path + ": key '" + key + "' value " + std::to_string(v.u) + " does not fit in int64");
    }
    return int64_t(v.u);
  }
  wrong_type(path, key, v, "an integer");
}

double as_float(const std::string& path, const std::string& key, const GgufValue& v) {
  if (is_float(v.type)) return v.f;
  if (is_signed_int(v.type)) return double(v.i);
  if (is_unsigned_int(v.type)) return double(v.u);
  wrong_type(path, key, v, "a number");
}

// The getters without a default report a missing key.
const GgufValue* require(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  if (!v) throw GgufError(f.path() + ": key '" + key + "' is missing");
  return v;
}

}  // namespace

std::string GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = require(*this, key);
  if (v->type != GgufType::STRING) wrong_type(path_, key, *v, "string");
  return v->str;
}

int64_t GgufFile::get_int(const std::string& key) const {
  const GgufValue* v = require(*this, key);
  return as_int(path_, key, *v);
}

double GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = require(*this, key);
  return as_float(path_, key, *v);
}

std::string GgufFile::get_string(const std::string& key, const std::string& def) const {
  return find(key) ? get_string(key) : def;
}

int64_t GgufFile::get_int(const std::string& key, int64_t def) const {
  return find(key) ? get_int(key) : def;
}

double GgufFile::get_float(const std::string& key, double def) const {
  return find(key) ? get_float(key) : def;
}

bool GgufFile::get_bool(const std::string& key, bool def) const {
  const GgufValue* v = find(key);
  if (!v) return def;
  if (v->type != GgufType::BOOL) wrong_type(path_, key, *v, "bool");
  return v->i != 0;
}

const std::vector<std::string>& GgufFile::get_string_array(const std::string& key) const {
  const GgufValue* v = require(*this, key);
  if (v->type != GgufType::ARRAY || v->elem_type != GgufType::STRING) {
    wrong_type(path_, key, *v, "array of string");
  }
  return v->strs;
}

std::vector<double> GgufFile::get_float_array(const std::string& key) const {
  const GgufValue* v = require(*this, key);
  const GgufType et = v->elem_type;
  if (v->type != GgufType::ARRAY || !(is_float(et) || is_signed_int(et) || is_unsigned_int(et))) {
    wrong_type(path_, key, *v, "array of numbers");
  }
  std::vector<double> out;
  out.reserve(v->arr.size());
  for (const GgufValue& e : v->arr) out.push_back(as_float(path_, key, e));
  return out;
}

std::vector<int64_t> GgufFile::get_int_array(const std::string& key) const {
  const GgufValue* v = require(*this, key);
  const GgufType et = v->elem_type;
  if (v->type != GgufType::ARRAY || !(is_signed_int(et) || is_unsigned_int(et))) {
    wrong_type(path_, key, *v, "array of integers");
  }
  std::vector<int64_t> out;
  out.reserve(v->arr.size());
  for (const GgufValue& e : v->arr) out.push_back(as_int(path_, key, e));
  return out;
}

}  // namespace tllm
