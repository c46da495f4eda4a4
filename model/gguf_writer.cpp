// GGUF writer: serialises the metadata and tensor infos in memory (small), then streams each tensor's
// bytes from the caller's fill callback to disk, padded to the alignment. The file is written under a
// temporary name and renamed into place only when complete, so a failed write never leaves a
// truncated model behind.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "model/gguf.h"

namespace tllm {

namespace {

bool is_power_of_two(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

class ByteSink {
 public:
  template <class T>
  void put(T v) {
    const size_t at = bytes_.size();
    bytes_.resize(at + sizeof(T));
    std::memcpy(bytes_.data() + at, &v, sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  void pad_to(uint64_t alignment) { bytes_.resize(align_up(bytes_.size(), alignment), 0); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

[[noreturn]] void bad_value(const std::string& key, const std::string& problem) {
  throw GgufError("GGUF writer: key '" + key + "': " + problem);
}

// Checks that `v` can be written: element types of arrays agree with the declared one.
void check_value(const std::string& key, const GgufValue& v) {
  if (static_cast<uint32_t>(v.type) > static_cast<uint32_t>(GgufType::F64)) bad_value(key, "unknown value type");
  if (v.type != GgufType::ARRAY) return;
  if (static_cast<uint32_t>(v.elem_type) > static_cast<uint32_t>(GgufType::F64)) {
    bad_value(key, "unknown array element type");
  }
  if (v.elem_type == GgufType::STRING) {
    if (!v.arr.empty()) bad_value(key, "a string array keeps its items in `strs`, not `arr`");
    return;
  }
  if (!v.strs.empty()) bad_value(key, "only a string array keeps items in `strs`");
  for (const GgufValue& e : v.arr) {
    if (e.type != v.elem_type) bad_value(key, "array element type differs from the array's element type");
    check_value(key, e);
  }
}

void put_value(ByteSink& out, const GgufValue& v) {
  switch (v.type) {
    case GgufType::U8: out.put<uint8_t>(uint8_t(v.u)); break;
    case GgufType::I8: out.put<int8_t>(int8_t(v.i)); break;
    case GgufType::U16: out.put<uint16_t>(uint16_t(v.u)); break;
    case GgufType::I16: out.put<int16_t>(int16_t(v.i)); break;
    case GgufType::U32: out.put<uint32_t>(uint32_t(v.u)); break;
    case GgufType::I32: out.put<int32_t>(int32_t(v.i)); break;
    case GgufType::U64: out.put<uint64_t>(v.u); break;
    case GgufType::I64: out.put<int64_t>(v.i); break;
    case GgufType::F32: out.put<float>(float(v.f)); break;
    case GgufType::F64: out.put<double>(v.f); break;
    case GgufType::BOOL: out.put<uint8_t>(v.i != 0 ? 1 : 0); break;
    case GgufType::STRING: out.put_string(v.str); break;
    case GgufType::ARRAY:
      out.put<uint32_t>(static_cast<uint32_t>(v.elem_type));
      out.put<uint64_t>(v.array_size());
      if (v.elem_type == GgufType::STRING) {
        for (const std::string& s : v.strs) out.put_string(s);
      } else {
        for (const GgufValue& e : v.arr) put_value(out, e);
      }
      break;
  }
}

GgufValue unsigned_value(GgufType t, uint64_t x) {
  GgufValue v;
  v.type = t;
  v.u = x;
  v.i = int64_t(x);
  return v;
}

GgufValue signed_value(GgufType t, int64_t x) {
  GgufValue v;
  v.type = t;
  v.i = x;
  v.u = x >= 0 ? uint64_t(x) : 0;
  return v;
}

GgufValue float_value(double x) {
  GgufValue v;
  v.type = GgufType::F32;
  v.f = x;
  return v;
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

}  // namespace

void GgufWriter::set_value(const std::string& key, const GgufValue& v) {
  if (key.empty()) throw GgufError("GGUF writer: empty key");
  check_value(key, v);
  if (key == "general.alignment") {
    if (v.type != GgufType::U32 || !is_power_of_two(v.u)) {
      bad_value(key, "the alignment must be a u32 power of two");
    }
    alignment_ = uint32_t(v.u);
  }
  for (auto& kv : kv_) {
    if (kv.first == key) {
      kv.second = v;
      return;
    }
  }
  kv_.emplace_back(key, v);
}

void GgufWriter::set_u32(const std::string& key, uint32_t v) { set_value(key, unsigned_value(GgufType::U32, v)); }
void GgufWriter::set_u64(const std::string& key, uint64_t v) { set_value(key, unsigned_value(GgufType::U64, v)); }
void GgufWriter::set_i32(const std::string& key, int32_t v) { set_value(key, signed_value(GgufType::I32, v)); }
void GgufWriter::set_f32(const std::string& key, float v) { set_value(key, float_value(v)); }
void GgufWriter::set_bool(const std::string& key, bool v) { set_value(key, signed_value(GgufType::BOOL, v)); }

void GgufWriter::set_string(const std::string& key, const std::string& s) {
  GgufValue v;
  v.type = GgufType::STRING;
  v.str = s;
  set_value(key, v);
}

void GgufWriter::set_string_array(const std::string& key, const std::vector<std::string>& items) {
  GgufValue v;
  v.type = GgufType::ARRAY;
  v.elem_type = GgufType::STRING;
  v.strs = items;
  set_value(key, v);
}

void GgufWriter::set_i32_array(const std::string& key, const std::vector<int32_t>& items) {
  GgufValue v;
  v.type = GgufType::ARRAY;
  v.elem_type = GgufType::I32;
  v.arr.reserve(items.size());
  for (int32_t x : items) v.arr.push_back(signed_value(GgufType::I32, x));
  set_value(key, v);
}

void GgufWriter::set_f32_array(const std::string& key, const std::vector<float>& items) {
  GgufValue v;
  v.type = GgufType::ARRAY;
  v.elem_type = GgufType::F32;
  v.arr.reserve(items.size());
  for (float x : items) v.arr.push_back(float_value(x));
  set_value(key, v);
}

void GgufWriter::set_version(uint32_t version) {
  if (version != 2 && version != 3) {
    throw GgufError("GGUF writer: version " + std::to_string(version) + " cannot be written (2 or 3)");
  }
  version_ = version;
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, const std::vector<int64_t>& dims) {
  const std::string tn = "GGUF writer: tensor '" + name + "'";
  if (name.empty() || name.size() > 64) throw GgufError(tn + ": the name must be 1 to 64 bytes long");
  for (const PendingTensor& t : tensors_) {
    if (t.name == name) throw GgufError(tn + " is declared twice");
  }
  int64_t bv = 0;
  if (!ggml_type_block(type, &bv, nullptr)) throw GgufError(tn + " has an unsupported type");
  if (dims.empty() || dims.size() > 4) throw GgufError(tn + " must have 1 to 4 dimensions");
  for (int64_t d : dims) {
    if (d <= 0) throw GgufError(tn + " has a dimension <= 0");
  }
  if (dims[0] % bv != 0) {
    throw GgufError(tn + " row length " + std::to_string(dims[0]) + " is not a multiple of the " +
                    ggml_type_name(type) + " block size " + std::to_string(bv));
  }
  tensors_.push_back({name, type, dims});
}

size_t GgufWriter::tensor_bytes(size_t index) const {
  const PendingTensor& t = tensors_.at(index);
  int64_t bv = 0, bb = 0;
  ggml_type_block(t.type, &bv, &bb);
  int64_t n = 1;
  for (int64_t d : t.dims) n *= d;
  return size_t(n / bv * bb);
}

void GgufWriter::write(const std::string& path, const FillFn& fill, const ProgressFn& progress) const {
  ByteSink head;
  head.put<uint32_t>(0x46554747u);  // "GGUF" read as a little-endian u32
  head.put<uint32_t>(version_);
  head.put<uint64_t>(tensors_.size());
  head.put<uint64_t>(kv_.size());
  for (const auto& kv : kv_) {
    head.put_string(kv.first);
    head.put<uint32_t>(static_cast<uint32_t>(kv.second.type));
    put_value(head, kv.second);
  }
  uint64_t offset = 0;
  size_t largest = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const PendingTensor& t = tensors_[i];
    head.put_string(t.name);
    head.put<uint32_t>(uint32_t(t.dims.size()));
    for (int64_t d : t.dims) head.put<uint64_t>(uint64_t(d));
    head.put<uint32_t>(static_cast<uint32_t>(t.type));
    head.put<uint64_t>(offset);
    offset += align_up(tensor_bytes(i), alignment_);
    largest = std::max(largest, tensor_bytes(i));
  }
  head.pad_to(alignment_);
  const size_t total = size_t(offset);

  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    throw GgufError(path + ": exists and is not a regular file; not replacing it");
  }
  const std::string tmp = path + ".tmp";
  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(tmp.c_str(), "wb"));
  if (!file) throw GgufError(path + ": cannot create: " + std::strerror(errno));
  auto write_bytes = [&](const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, file.get()) != n) {
      throw GgufError(path + ": write failed: " + std::strerror(errno));
    }
  };
  try {
    write_bytes(head.bytes().data(), head.bytes().size());
    constexpr size_t kChunk = size_t(8) << 20;
    std::vector<uint8_t> buf;
    buf.reserve(largest);
    const std::vector<uint8_t> zeros(alignment_, 0);
    size_t done = 0;
    if (progress) progress(0, total);
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const size_t bytes = tensor_bytes(i);
      buf.assign(bytes, 0);
      if (fill) fill(i, buf.data(), bytes);
      for (size_t at = 0; at < bytes; at += kChunk) {
        const size_t n = std::min(kChunk, bytes - at);
        write_bytes(buf.data() + at, n);
        done += n;
        if (progress) progress(done, total);
      }
      const size_t pad = size_t(align_up(bytes, alignment_) - bytes);
      if (pad) {
        write_bytes(zeros.data(), pad);
        done += pad;
        if (progress) progress(done, total);
      }
    }
    std::FILE* f = file.release();
    if (std::fclose(f) != 0) throw GgufError(path + ": write failed: " + std::strerror(errno));
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      throw GgufError(path + ": cannot rename " + tmp + " into place: " + std::strerror(errno));
    }
  } catch (...) {
    file.reset();
    std::remove(tmp.c_str());
    throw;
  }
}

}  // namespace tllm
