// GGUF reader over files written by GgufWriter: every value type, arrays and nested arrays, typed
// getters, alignment (default and custom), versions 2 and 3, tensor data placement, and a real
// llama.cpp-written file from the shared test data.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "gguf_test_util.h"
#include "model/gguf.h"
#include "model/quants.h"

namespace tllm {
namespace {

using test::ScratchDir;

GgufValue scalar(GgufType t, int64_t i, uint64_t u, double f = 0) {
  GgufValue v;
  v.type = t;
  v.i = i;
  v.u = u;
  v.f = f;
  return v;
}

GgufValue array_of(GgufType elem, std::vector<GgufValue> items) {
  GgufValue v;
  v.type = GgufType::ARRAY;
  v.elem_type = elem;
  v.arr = std::move(items);
  return v;
}

GgufValue i32_array(std::vector<int32_t> xs) {
  std::vector<GgufValue> items;
  for (int32_t x : xs) items.push_back(scalar(GgufType::I32, x, 0));
  return array_of(GgufType::I32, std::move(items));
}

// A file with one key of every scalar type at the edges of its range, arrays of several element
// types, a string array, empty arrays and arrays nested three deep.
void write_all_types(const std::string& path, uint32_t version) {
  GgufWriter w;
  w.set_version(version);
  w.set_value("u8", scalar(GgufType::U8, 0, 255));
  w.set_value("i8", scalar(GgufType::I8, -128, 0));
  w.set_value("u16", scalar(GgufType::U16, 0, 65535));
  w.set_value("i16", scalar(GgufType::I16, -32768, 0));
  w.set_u32("u32", 4000000000u);
  w.set_i32("i32", -2000000000);
  w.set_u64("u64", std::numeric_limits<uint64_t>::max());
  w.set_value("i64", scalar(GgufType::I64, std::numeric_limits<int64_t>::min(), 0));
  w.set_f32("f32", 0.15625f);
  w.set_value("f64", scalar(GgufType::F64, 0, 0, 1.0 / 3.0));
  w.set_bool("bool_true", true);
  w.set_bool("bool_false", false);
  w.set_string("string", "héllo\nworld");
  w.set_string("empty_string", "");
  w.set_string_array("strings", {"a", "", "ccc", "Ġ t"});
  w.set_i32_array("i32s", {1, -2, 3});
  w.set_f32_array("f32s", {0.5f, -1.25f});
  w.set_value("u8s", array_of(GgufType::U8, {scalar(GgufType::U8, 0, 7), scalar(GgufType::U8, 0, 255)}));
  w.set_value("u64s", array_of(GgufType::U64, {scalar(GgufType::U64, 0, uint64_t(1) << 40)}));
  w.set_value("f64s", array_of(GgufType::F64, {scalar(GgufType::F64, 0, 0, -2.5)}));
  w.set_value("bools", array_of(GgufType::BOOL, {scalar(GgufType::BOOL, 1, 1), scalar(GgufType::BOOL, 0, 0)}));
  w.set_value("empty_i32s", array_of(GgufType::I32, {}));
  w.set_string_array("empty_strings", {});
  // [[[1, 2], [3]], [[]]]
  GgufValue inner_a = array_of(GgufType::ARRAY, {i32_array({1, 2}), i32_array({3})});
  GgufValue inner_b = array_of(GgufType::ARRAY, {i32_array({})});
  w.set_value("nested", array_of(GgufType::ARRAY, {inner_a, inner_b}));
  w.write(path, {});
}

TEST(GgufReader, ReadsEveryValueType) {
  for (uint32_t version : {2u, 3u}) {
    ScratchDir dir;
    const std::string path = dir.file("all.gguf");
    write_all_types(path, version);
    auto f = GgufFile::open(path);
    EXPECT_EQ(f->version(), version);
    EXPECT_EQ(f->alignment(), 32u);
    EXPECT_TRUE(f->tensors().empty());
    ASSERT_EQ(f->metadata().size(), 24u);
    EXPECT_EQ(f->metadata()[0].first, "u8");  // file order is kept
    EXPECT_EQ(f->metadata()[23].first, "nested");

    EXPECT_EQ(f->find("u8")->type, GgufType::U8);
    EXPECT_EQ(f->find("u8")->u, 255u);
    EXPECT_EQ(f->find("i8")->i, -128);
    EXPECT_EQ(f->find("u16")->u, 65535u);
    EXPECT_EQ(f->find("i16")->i, -32768);
    EXPECT_EQ(f->find("u32")->u, 4000000000u);
    EXPECT_EQ(f->find("i32")->i, -2000000000);
    EXPECT_EQ(f->find("u64")->u, std::numeric_limits<uint64_t>::max());
    EXPECT_EQ(f->find("i64")->i, std::numeric_limits<int64_t>::min());
    EXPECT_EQ(f->find("f32")->type, GgufType::F32);
    EXPECT_EQ(f->find("f32")->f, 0.15625);
    EXPECT_EQ(f->find("f64")->f, 1.0 / 3.0);
    EXPECT_EQ(f->find("bool_true")->type, GgufType::BOOL);
    EXPECT_TRUE(f->get_bool("bool_true", false));
    EXPECT_FALSE(f->get_bool("bool_false", true));
    EXPECT_EQ(f->get_string("string"), "héllo\nworld");
    EXPECT_EQ(f->get_string("empty_string"), "");

    EXPECT_EQ(f->get_string_array("strings"), (std::vector<std::string>{"a", "", "ccc", "Ġ t"}));
    EXPECT_EQ(f->get_int_array("i32s"), (std::vector<int64_t>{1, -2, 3}));
    EXPECT_EQ(f->get_float_array("f32s"), (std::vector<double>{0.5, -1.25}));
    EXPECT_EQ(f->get_int_array("u8s"), (std::vector<int64_t>{7, 255}));
    EXPECT_EQ(f->get_int_array("u64s"), (std::vector<int64_t>{int64_t(1) << 40}));
    EXPECT_EQ(f->get_float_array("f64s"), (std::vector<double>{-2.5}));
    const GgufValue* bools = f->find("bools");
    ASSERT_EQ(bools->array_size(), 2u);
    EXPECT_EQ(bools->arr[0].i, 1);
    EXPECT_EQ(bools->arr[1].i, 0);
    EXPECT_EQ(f->find("empty_i32s")->array_size(), 0u);
    EXPECT_EQ(f->find("empty_i32s")->elem_type, GgufType::I32);
    EXPECT_TRUE(f->get_string_array("empty_strings").empty());

    const GgufValue* nested = f->find("nested");
    ASSERT_EQ(nested->elem_type, GgufType::ARRAY);
    ASSERT_EQ(nested->array_size(), 2u);
    const GgufValue& a = nested->arr[0];
    ASSERT_EQ(a.elem_type, GgufType::ARRAY);
    ASSERT_EQ(a.array_size(), 2u);
    ASSERT_EQ(a.arr[0].array_size(), 2u);
    EXPECT_EQ(a.arr[0].arr[0].i, 1);
    EXPECT_EQ(a.arr[0].arr[1].i, 2);
    EXPECT_EQ(a.arr[1].arr[0].i, 3);
    ASSERT_EQ(nested->arr[1].array_size(), 1u);
    EXPECT_EQ(nested->arr[1].arr[0].array_size(), 0u);
  }
}

TEST(GgufReader, TypedGettersConvertAndReportMistakes) {
  ScratchDir dir;
  const std::string path = dir.file("getters.gguf");
  write_all_types(path, 3);
  auto f = GgufFile::open(path);
  EXPECT_EQ(f->get_int("u8"), 255);
  EXPECT_EQ(f->get_int("i16"), -32768);
  EXPECT_EQ(f->get_int("u32"), 4000000000);
  EXPECT_DOUBLE_EQ(f->get_float("f32"), 0.15625);
  EXPECT_DOUBLE_EQ(f->get_float("i32"), -2000000000.0);  // an integer read as a number
  EXPECT_EQ(f->get_int("missing", 7), 7);
  EXPECT_EQ(f->get_string("missing", "dflt"), "dflt");
  EXPECT_DOUBLE_EQ(f->get_float("missing", 2.5), 2.5);
  EXPECT_TRUE(f->get_bool("missing", true));
  EXPECT_EQ(f->find("missing"), nullptr);

  auto expect_error = [&](auto&& call, const std::string& needle) {
    try {
      call();
      ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
    } catch (const GgufError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find(needle), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
    }
  };
  expect_error([&] { f->get_string("missing"); }, "key 'missing' is missing");
  expect_error([&] { f->get_int("missing"); }, "key 'missing' is missing");
  expect_error([&] { f->get_string("u32"); }, "key 'u32' has type u32, expected string");
  expect_error([&] { f->get_string("u32", "x"); }, "expected string");  // present with a wrong type
  expect_error([&] { f->get_int("f32"); }, "key 'f32' has type f32, expected an integer");
  expect_error([&] { f->get_int("u64"); }, "does not fit in int64");
  expect_error([&] { f->get_float("string"); }, "expected a number");
  expect_error([&] { f->get_bool("u8", false); }, "expected bool");
  expect_error([&] { f->get_string_array("i32s"); }, "has type array of i32, expected array of string");
  expect_error([&] { f->get_int_array("f32s"); }, "expected array of integers");
  expect_error([&] { f->get_float_array("strings"); }, "expected array of numbers");
}

TEST(GgufReader, ValueSummaries) {
  ScratchDir dir;
  const std::string path = dir.file("summary.gguf");
  write_all_types(path, 3);
  auto f = GgufFile::open(path);
  EXPECT_EQ(f->find("u8")->to_string(), "255");
  EXPECT_EQ(f->find("i8")->to_string(), "-128");
  EXPECT_EQ(f->find("f32")->to_string(), "0.15625");
  EXPECT_EQ(f->find("bool_true")->to_string(), "true");
  EXPECT_EQ(f->find("string")->to_string(), "\"héllo\\nworld\"");
  EXPECT_EQ(f->find("strings")->to_string(), "[string x 4] [\"a\", \"\", \"ccc\", \"Ġ t\"]");
  EXPECT_EQ(f->find("i32s")->to_string(), "[i32 x 3] [1, -2, 3]");
  EXPECT_EQ(f->find("empty_i32s")->to_string(), "[i32 x 0]");
  EXPECT_EQ(f->find("nested")->to_string(), "[array x 2] [[array x 2] [[i32 x 2] [1, 2], [i32 x 1] [3]], [array x 1] [[i32 x 0]]]");

  GgufWriter w;
  std::vector<std::string> many;
  for (int i = 0; i < 151936; ++i) many.push_back("t" + std::to_string(i));
  w.set_string_array("tokens", many);
  w.set_string("long", std::string(200, 'x'));
  const std::string p2 = dir.file("long.gguf");
  w.write(p2, {});
  auto g = GgufFile::open(p2);
  EXPECT_EQ(g->find("tokens")->to_string(), "[string x 151936] [\"t0\", \"t1\", \"t2\", \"t3\", \"t4\", ...]");
  EXPECT_EQ(g->find("long")->to_string(), "\"" + std::string(80, 'x') + "...\" (200 bytes)");
}

// Tensor bytes: byte j of tensor i is (i * 31 + j) mod 251, so misplaced data shows.
uint8_t pattern(size_t tensor, size_t j) { return uint8_t((tensor * 31 + j) % 251); }

void fill_pattern(size_t i, uint8_t* dst, size_t bytes) {
  for (size_t j = 0; j < bytes; ++j) dst[j] = pattern(i, j);
}

TEST(GgufReader, TensorsAreAlignedAndHoldTheirBytes) {
  for (uint32_t alignment : {0u, 64u, 256u}) {  // 0: the default, 32, with no general.alignment key
    ScratchDir dir;
    const std::string path = dir.file("tensors.gguf");
    GgufWriter w;
    if (alignment) w.set_u32("general.alignment", alignment);
    w.set_string("general.architecture", "test");
    w.add_tensor("a", GgmlType::F32, {3});                    // 12 bytes: the next needs padding
    w.add_tensor("b.weight", GgmlType::Q4_0, {64, 3});        // 6 blocks of 18 bytes
    w.add_tensor("c", GgmlType::Q6_K, {256, 2, 1});           // 2 blocks of 210 bytes
    w.add_tensor("d", GgmlType::F16, {2, 3, 4, 5});
    w.add_tensor("e", GgmlType::BF16, {7});
    EXPECT_EQ(w.n_tensors(), 5u);
    EXPECT_EQ(w.tensor_bytes(0), 12u);
    EXPECT_EQ(w.tensor_bytes(1), 108u);
    EXPECT_EQ(w.tensor_bytes(2), 420u);
    EXPECT_EQ(w.tensor_bytes(3), 240u);
    EXPECT_EQ(w.tensor_bytes(4), 14u);
    std::vector<std::pair<size_t, size_t>> calls;
    w.write(path, fill_pattern, [&](size_t done, size_t total) { calls.emplace_back(done, total); });

    const uint64_t a = alignment ? alignment : 32;
    ASSERT_FALSE(calls.empty());
    for (size_t i = 1; i < calls.size(); ++i) EXPECT_GE(calls[i].first, calls[i - 1].first);
    EXPECT_EQ(calls.back().first, calls.back().second);
    // Data bytes, each tensor padded to the alignment.
    size_t expected_total = 0;
    for (size_t b : {12, 108, 420, 240, 14}) expected_total += (b + a - 1) / a * a;
    EXPECT_EQ(calls.back().second, expected_total);

    auto f = GgufFile::open(path);
    EXPECT_EQ(f->alignment(), a);
    ASSERT_EQ(f->tensors().size(), 5u);
    const std::vector<std::string> names = {"a", "b.weight", "c", "d", "e"};
    for (size_t i = 0; i < names.size(); ++i) {
      const TensorInfo& t = f->tensors()[i];
      EXPECT_EQ(t.name, names[i]);
      EXPECT_EQ(f->find_tensor(names[i]), &t);
      EXPECT_EQ(t.offset % a, 0u);
      // The map starts on a page boundary, so the address shows the position in the file.
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % a, 0u) << t.name;
      for (size_t j = 0; j < t.bytes; ++j) ASSERT_EQ(t.data[j], pattern(i, j)) << t.name << " byte " << j;
    }
    EXPECT_EQ(f->find_tensor("missing"), nullptr);
    const TensorInfo& b = *f->find_tensor("b.weight");
    EXPECT_EQ(b.type, GgmlType::Q4_0);
    EXPECT_EQ(b.dims, (std::vector<int64_t>{64, 3}));
    EXPECT_EQ(b.n_elements(), 192);
    EXPECT_EQ(b.rows(), 3);
    const TensorInfo& d = *f->find_tensor("d");
    EXPECT_EQ(d.n_elements(), 120);
    EXPECT_EQ(d.rows(), 60);
    EXPECT_EQ(f->find_tensor("a")->rows(), 1);
    EXPECT_EQ(f->file_size(), std::filesystem::file_size(path));
  }
}

// IQ4_NL and IQ4_XS tensors: the reader takes their block sizes (32 values in 18 bytes, 256 in 136)
// and their values dequantise. Expected values from the format definitions, worked by hand:
//   IQ4_NL {64, 2}: block i (i = 0..3) has d = 0.25·(i + 1) and every qs byte 0x3c, so value j of a
//     block is d·kvalues_iq4nl[0xc] = d·53 (j < 16, low nibble) or d·kvalues_iq4nl[0x3] = d·(-65).
//   IQ4_XS {256, 2}: every qs byte 0x80, so value j of a sub-block has index 0 (-127, j < 16) or 8
//     (1, j >= 16). Row 0: d = 1, every 6-bit scale 63 (scales_h 0xffff, scales_l bytes 0xff) ->
//     multiplier 31: 31·(-127) = -3937 and 31. Row 1: d = 2, every scale 0 -> multiplier -32:
//     2·(-32)·(-127) = 8128 and 2·(-32)·1 = -64.
TEST(GgufReader, Iq4TensorsOpenAndDequantise) {
  ScratchDir dir;
  const std::string path = dir.file("iq4.gguf");
  GgufWriter w;
  w.set_string("general.architecture", "test");
  w.add_tensor("nl.weight", GgmlType::IQ4_NL, {64, 2});
  w.add_tensor("xs.weight", GgmlType::IQ4_XS, {256, 2});
  EXPECT_EQ(w.tensor_bytes(0), 72u);   // 4 blocks of 18 bytes
  EXPECT_EQ(w.tensor_bytes(1), 272u);  // 2 super-blocks of 136 bytes
  w.write(path, [](size_t index, uint8_t* dst, size_t) {
    if (index == 0) {
      const uint16_t d[4] = {0x3400, 0x3800, 0x3a00, 0x3c00};  // 0.25, 0.5, 0.75, 1
      for (int i = 0; i < 4; ++i) {
        dst[18 * i] = uint8_t(d[i] & 0xff);
        dst[18 * i + 1] = uint8_t(d[i] >> 8);
        std::memset(dst + 18 * i + 2, 0x3c, 16);
      }
      return;
    }
    for (int r = 0; r < 2; ++r) {
      uint8_t* b = dst + 136 * r;
      b[0] = 0x00;
      b[1] = r ? 0x40 : 0x3c;                // d = 2 or 1
      std::memset(b + 2, r ? 0x00 : 0xff, 6);  // scales_h, scales_l
      std::memset(b + 8, 0x80, 128);
    }
  });

  auto f = GgufFile::open(path);
  const TensorInfo* nl = f->find_tensor("nl.weight");
  const TensorInfo* xs = f->find_tensor("xs.weight");
  ASSERT_NE(nl, nullptr);
  ASSERT_NE(xs, nullptr);
  EXPECT_EQ(nl->type, GgmlType::IQ4_NL);
  EXPECT_EQ(std::string(ggml_type_name(nl->type)), "IQ4_NL");
  EXPECT_EQ(nl->dims, (std::vector<int64_t>{64, 2}));
  EXPECT_EQ(nl->bytes, 72u);
  EXPECT_EQ(xs->type, GgmlType::IQ4_XS);
  EXPECT_EQ(std::string(ggml_type_name(xs->type)), "IQ4_XS");
  EXPECT_EQ(xs->dims, (std::vector<int64_t>{256, 2}));
  EXPECT_EQ(xs->bytes, 272u);

  const std::vector<float> y = dequantize_tensor(*nl);
  ASSERT_EQ(y.size(), 128u);
  for (size_t v = 0; v < y.size(); ++v) {
    const float d = 0.25f * float(v / 32 + 1);
    ASSERT_EQ(y[v], v % 32 < 16 ? d * 53 : d * -65) << "IQ4_NL value " << v;
  }
  const std::vector<float> z = dequantize_tensor(*xs);
  ASSERT_EQ(z.size(), 512u);
  for (size_t v = 0; v < z.size(); ++v) {
    const bool low = v % 32 < 16;
    const float want = v < 256 ? (low ? -3937.0f : 31.0f) : (low ? 8128.0f : -64.0f);
    ASSERT_EQ(z[v], want) << "IQ4_XS value " << v;
  }
}

TEST(GgufWriter, SettingAKeyAgainReplacesItInPlace) {
  ScratchDir dir;
  GgufWriter w;
  w.set_u32("x", 1);
  w.set_string("y", "a");
  w.set_string("x", "two");
  const std::string path = dir.file("replace.gguf");
  w.write(path, {});
  auto f = GgufFile::open(path);
  ASSERT_EQ(f->metadata().size(), 2u);
  EXPECT_EQ(f->metadata()[0].first, "x");
  EXPECT_EQ(f->get_string("x"), "two");
}

TEST(GgufWriter, RejectsWhatItCannotWrite) {
  GgufWriter w;
  w.add_tensor("t", GgmlType::F32, {4});
  EXPECT_THROW(w.add_tensor("t", GgmlType::F32, {4}), GgufError);               // declared twice
  EXPECT_THROW(w.add_tensor("q", GgmlType::Q4_K, {128, 2}), GgufError);         // row not a block multiple
  EXPECT_THROW(w.add_tensor("z", GgmlType::F32, {4, 0}), GgufError);            // empty dimension
  EXPECT_THROW(w.add_tensor("five", GgmlType::F32, {1, 1, 1, 1, 1}), GgufError);
  EXPECT_THROW(w.add_tensor("", GgmlType::F32, {1}), GgufError);
  EXPECT_THROW(w.add_tensor(std::string(65, 'n'), GgmlType::F32, {1}), GgufError);
  EXPECT_THROW(w.add_tensor("i64", static_cast<GgmlType>(27), {4}), GgufError);        // I64: not read
  EXPECT_THROW(w.set_u32("general.alignment", 48), GgufError);
  EXPECT_THROW(w.set_u64("general.alignment", 64), GgufError);
  EXPECT_THROW(w.set_version(1), GgufError);
  GgufValue mixed = array_of(GgufType::I32, {scalar(GgufType::U8, 0, 1)});
  EXPECT_THROW(w.set_value("mixed", mixed), GgufError);
}

TEST(GgufWriter, LeavesNoFileBehindWhenWritingFails) {
  ScratchDir dir;
  GgufWriter w;
  w.add_tensor("t", GgmlType::F32, {4});
  const std::string path = dir.file("fails.gguf");
  EXPECT_THROW(w.write(path, [](size_t, uint8_t*, size_t) { throw GgufError("fill failed"); }), GgufError);
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  try {
    w.write(dir.file("no/such/folder/x.gguf"), {});
    ADD_FAILURE() << "no error";
  } catch (const GgufError& e) {
    EXPECT_NE(std::string(e.what()).find("x.gguf: cannot create"), std::string::npos) << e.what();
  }
}

TEST(GgufWriter, DoesNotReplaceAFileThatIsNotRegular) {
  // A pipe (like /dev/null or a device) at the destination stays: the rename would replace it with
  // a regular file.
  ScratchDir dir;
  const std::string fifo = dir.file("pipe");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  GgufWriter w;
  w.add_tensor("t", GgmlType::F32, {4});
  try {
    w.write(fifo, {});
    ADD_FAILURE() << "no error";
  } catch (const GgufError& e) {
    EXPECT_NE(std::string(e.what()).find("pipe: exists and is not a regular file"), std::string::npos) << e.what();
  }
  EXPECT_EQ(std::filesystem::status(fifo).type(), std::filesystem::file_type::fifo);
  EXPECT_FALSE(std::filesystem::exists(fifo + ".tmp"));
}

TEST(GgufReader, ReadsALlamaCppVocabularyFile) {
  const std::string path = test::shared_dir() + "/data/tokenizer-vectors/ggml-vocab-gpt-2.gguf";
  TLLM_REQUIRE_SHARED_FILE(path);
  auto f = GgufFile::open(path);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_EQ(f->get_string("general.architecture"), "gpt2");
  EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "gpt2");
  const auto& tokens = f->get_string_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 50257u);
  EXPECT_EQ(tokens[0], "!");
  EXPECT_EQ(tokens[50256], "<|endoftext|>");
  EXPECT_EQ(f->get_string_array("tokenizer.ggml.merges").size(), 50000u);
  EXPECT_EQ(f->get_int_array("tokenizer.ggml.token_type").size(), 50257u);
  EXPECT_EQ(f->get_int("tokenizer.ggml.eos_token_id"), 50256);
}

}  // namespace
}  // namespace tllm
