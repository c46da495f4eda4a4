#include "hardening/hardening_util.h"

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <nlohmann/json.hpp>

#include "model/model.h"
#include "model/synth.h"

namespace tllm::test {

ScratchDir::ScratchDir() {
  static std::atomic<int> counter{0};
  const std::filesystem::path p = std::filesystem::temp_directory_path() /
                                  ("tllm-hardening-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::filesystem::create_directories(p);
  dir_ = p.string();
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  if (!f) throw std::runtime_error(path + ": cannot write");
}

void write_text(const std::string& path, const std::string& text) {
  write_bytes(path, std::vector<uint8_t>(text.begin(), text.end()));
}

const std::string& base_model_path() {
  static ScratchDir dir;  // removed at exit
  static std::string path;
  static std::once_flag once;
  std::call_once(once, [] {
    path = dir.file("tiny.gguf");
    write_synth_model(tiny_test_model(), path);
  });
  return path;
}

// ---- header map ------------------------------------------------------------------------------

namespace {

class Walker {
 public:
  explicit Walker(const std::vector<uint8_t>& b) : b_(b) {}

  std::vector<GgufField> walk() {
    field("magic", 4);
    field("version", 4);
    const uint64_t n_tensors = field_u64("n_tensors");
    const uint64_t n_kv = field_u64("n_kv");
    uint64_t alignment = 32;
    for (uint64_t k = 0; k < n_kv; ++k) {
      const std::string key = string_field("key " + std::to_string(k));
      const uint32_t type = field_u32("value type of '" + key + "'");
      if (key == "general.alignment") alignment = peek_u32();
      value(key, type);
    }
    for (uint64_t t = 0; t < n_tensors; ++t) {
      const std::string name = string_field("tensor " + std::to_string(t) + " name");
      const std::string tn = "tensor '" + name + "'";
      const uint32_t n_dims = field_u32("n_dims of " + tn);
      for (uint32_t d = 0; d < n_dims; ++d) field_u64("dim " + std::to_string(d) + " of " + tn);
      field_u32("type of " + tn);
      field_u64("offset of " + tn);
    }
    const size_t data = (pos_ + alignment - 1) / alignment * alignment;
    fields_.push_back({"data section", data, b_.size() - data});
    return fields_;
  }

 private:
  void need(size_t n) const {
    if (pos_ + n > b_.size()) throw std::runtime_error("gguf_fields: the base file is truncated");
  }
  void field(const std::string& what, size_t size) {
    need(size);
    fields_.push_back({what, pos_, size});
    pos_ += size;
  }
  uint32_t peek_u32() const {
    uint32_t v;
    need(4);
    std::memcpy(&v, b_.data() + pos_, 4);
    return v;
  }
  uint64_t peek_u64() const {
    uint64_t v;
    need(8);
    std::memcpy(&v, b_.data() + pos_, 8);
    return v;
  }
  uint32_t field_u32(const std::string& what) {
    const uint32_t v = peek_u32();
    field(what, 4);
    return v;
  }
  uint64_t field_u64(const std::string& what) {
    const uint64_t v = peek_u64();
    field(what, 8);
    return v;
  }
  // A string: "<what> length" and "<what> bytes" (recorded only when `record`).
  std::string string_field(const std::string& what, bool record = true) {
    const uint64_t n = peek_u64();
    if (record) {
      field(what + " length", 8);
    } else {
      pos_ += 8;
    }
    need(n);
    std::string s(reinterpret_cast<const char*>(b_.data() + pos_), n);
    if (record && n > 0) {
      field(what + " bytes", n);
    } else {
      pos_ += n;
    }
    return s;
  }
  static size_t scalar_size(uint32_t type) {
    switch (type) {
      case 0: case 1: case 7: return 1;
      case 2: case 3: return 2;
      case 4: case 5: case 6: return 4;
      case 10: case 11: case 12: return 8;
    }
    throw std::runtime_error("gguf_fields: unexpected value type " + std::to_string(type));
  }
  void value(const std::string& key, uint32_t type) {
    if (type == 8) {
      string_field("string of '" + key + "'");
    } else if (type == 9) {
      const uint32_t et = field_u32("element type of '" + key + "'");
      const uint64_t n = field_u64("array length of '" + key + "'");
      for (uint64_t i = 0; i < n; ++i) {
        const bool record = n <= 4 || i < 2 || i + 1 == n;
        const std::string what = "element " + std::to_string(i) + " of '" + key + "'";
        if (et == 8) {
          string_field(what, record);
        } else if (et == 9) {
          throw std::runtime_error("gguf_fields: nested arrays are not mapped");
        } else if (record) {
          field(what, scalar_size(et));
        } else {
          pos_ += scalar_size(et);
        }
      }
    } else {
      field("value of '" + key + "'", scalar_size(type));
    }
  }

  const std::vector<uint8_t>& b_;
  size_t pos_ = 0;
  std::vector<GgufField> fields_;
};

}  // namespace

std::vector<GgufField> gguf_fields(const std::vector<uint8_t>& bytes) { return Walker(bytes).walk(); }

GgufField find_field(const std::vector<GgufField>& fields, const std::string& what) {
  for (const GgufField& f : fields) {
    if (f.what == what) return f;
  }
  ADD_FAILURE() << "no header field '" << what << "'";
  return {};
}

// ---- rewriting -------------------------------------------------------------------------------

void write_edited(const GgufFile& src, const std::string& path, const ModelEdit& edit) {
  GgufWriter w;
  for (const auto& [key, value] : src.metadata()) {
    if (edit.drop_keys.count(key)) continue;
    auto it = edit.set_keys.find(key);
    w.set_value(key, it != edit.set_keys.end() ? it->second : value);
  }
  for (const auto& [key, value] : edit.set_keys) {
    if (!src.find(key)) w.set_value(key, value);
  }
  std::vector<const TensorInfo*> sources;  // null: zeros
  std::vector<std::string> names;          // each written tensor's name, in the file's order
  for (const TensorInfo& t : src.tensors()) {
    if (edit.drop_tensors.count(t.name)) continue;
    auto shape = edit.reshape.find(t.name);
    auto type = edit.retype.find(t.name);
    const bool changed = shape != edit.reshape.end() || type != edit.retype.end();
    w.add_tensor(t.name, type != edit.retype.end() ? type->second : t.type,
                 shape != edit.reshape.end() ? shape->second : t.dims);
    sources.push_back(changed ? nullptr : &t);
    names.push_back(t.name);
  }
  for (const auto& [name, spec] : edit.add_tensors) {
    w.add_tensor(name, spec.first, spec.second);
    sources.push_back(nullptr);
    names.push_back(name);
  }
  w.write(path, [&](size_t index, uint8_t* dst, size_t bytes) {
    const TensorInfo* t = sources[index];
    if (t && t->bytes == bytes) {
      std::memcpy(dst, t->data, bytes);
    } else {
      std::memset(dst, 0, bytes);
    }
    if (auto v = edit.f32_values.find(names[index]); v != edit.f32_values.end()) {
      if (v->second.size() * sizeof(float) != bytes) {
        throw std::runtime_error("f32_values: wrong count for " + v->first);
      }
      std::memcpy(dst, v->second.data(), bytes);
    }
    if (auto k = edit.f32_scale.find(names[index]); k != edit.f32_scale.end()) {
      if (!t || t->type != GgmlType::F32) throw std::runtime_error("f32_scale: " + k->first + " is not an F32 tensor");
      for (size_t i = 0; i < bytes; i += sizeof(float)) {
        float v;
        std::memcpy(&v, dst + i, sizeof v);
        v *= k->second;
        std::memcpy(dst + i, &v, sizeof v);
      }
    }
  });
}

GgufValue u32_value(uint32_t v) {
  GgufValue g;
  g.type = GgufType::U32;
  g.u = v;
  g.i = v;
  return g;
}

GgufValue i32_value(int32_t v) {
  GgufValue g;
  g.type = GgufType::I32;
  g.i = v;
  g.u = v >= 0 ? uint64_t(v) : 0;
  return g;
}

GgufValue u64_value(uint64_t v) {
  GgufValue g;
  g.type = GgufType::U64;
  g.u = v;
  g.i = v <= uint64_t(INT64_MAX) ? int64_t(v) : 0;
  return g;
}

GgufValue f32_value(float v) {
  GgufValue g;
  g.type = GgufType::F32;
  g.f = v;
  return g;
}

GgufValue string_value(const std::string& v) {
  GgufValue g;
  g.type = GgufType::STRING;
  g.str = v;
  return g;
}

GgufValue string_array_value(const std::vector<std::string>& v) {
  GgufValue g;
  g.type = GgufType::ARRAY;
  g.elem_type = GgufType::STRING;
  g.strs = v;
  return g;
}

GgufValue i32_array_value(const std::vector<int32_t>& v) {
  GgufValue g;
  g.type = GgufType::ARRAY;
  g.elem_type = GgufType::I32;
  for (int32_t x : v) g.arr.push_back(i32_value(x));
  return g;
}

// ---- expectations ----------------------------------------------------------------------------

bool expect_inspect_outcome(const RunResult& r, const std::string& path, bool json) {
  std::unique_ptr<GgufFile> f;
  try {
    f = GgufFile::open(path);
  } catch (const GgufError& e) {
    EXPECT_EQ(r.exit_code, 1) << r.describe();
    EXPECT_EQ(r.err, "tiny_llm: error: " + std::string(e.what()) + "\n") << r.describe();
    EXPECT_FALSE(r.timed_out) << r.describe();
    EXPECT_EQ(r.signal, 0) << r.describe();
    return false;
  }
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.err, "") << r.describe();
  std::string verdict;  // empty: runnable
  try {
    read_model_config(*f);
  } catch (const std::exception& e) {
    verdict = e.what();
  }
  if (!json) {
    EXPECT_NE(r.out.find(verdict.empty() ? "\nmodel: " : "not a runnable model: " + verdict), std::string::npos)
        << r.describe();
    return true;
  }
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.describe();
  if (j.is_discarded()) return true;
  EXPECT_EQ(j.value("metadata", nlohmann::json::object()).size(), f->metadata().size()) << r.describe();
  EXPECT_EQ(j.value("tensors", nlohmann::json::array()).size(), f->tensors().size()) << r.describe();
  EXPECT_EQ(j.value("model", nlohmann::json()).is_null(), !verdict.empty()) << r.describe();
  if (!verdict.empty()) {
    EXPECT_EQ(j.value("not_runnable", ""), verdict) << r.describe();
  }
  return true;
}

std::vector<std::string> inspect_command(const std::string& path, bool json) {
  std::vector<std::string> c = {tiny_llm_path(), "inspect", path};
  if (json) c.push_back("--json");
  return c;
}

std::vector<std::string> generate_command(const std::string& path) {
  return {tiny_llm_path(), "generate", "-m", path, "-p", "hi", "-n", "2", "--backend", "cpu", "-q"};
}

}  // namespace tllm::test
