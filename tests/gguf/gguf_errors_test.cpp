// The GGUF reader on malformed files: each must fail with a one-line GgufError that names the file
// and the problem, never crash or read outside the file.
#include <gtest/gtest.h>

#include "gguf_test_util.h"
#include "model/gguf.h"

namespace tllm {
namespace {

using test::RawGguf;
using test::ScratchDir;

constexpr uint32_t kString = 8, kArray = 9, kU32 = 4, kU64 = 10, kU8 = 0, kI32 = 5, kBool = 7;
constexpr uint32_t kF32 = 0, kQ4_0 = 2, kQ8_0 = 8, kIQ4_XS = 23;

// Opens `path` and checks that it fails with a message holding the path and `needle`.
void expect_error(const std::string& path, const std::string& needle) {
  try {
    GgufFile::open(path);
    ADD_FAILURE() << path << " opened; expected an error containing '" << needle << "'";
  } catch (const GgufError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << "message does not start with the file name: " << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << "expected '" << needle << "' in: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
  }
}

void expect_error(const RawGguf& file, const std::string& needle) {
  ScratchDir dir;
  const std::string path = dir.file("bad.gguf");
  file.save(path);
  expect_error(path, needle);
}

// A small valid file: two keys, a Q8_0 tensor "w" (32 x 2: 68 bytes, padded to 96) and an F32
// tensor "b" (4 values) after it.
RawGguf valid_file() {
  RawGguf r;
  r.header(3, 2, 2).kv_string("general.architecture", "test").kv_u32("general.alignment", 32);
  r.tensor("w", {32, 2}, kQ8_0, 0).tensor("b", {4}, kF32, 96);
  r.pad_to(32).zeros(96 + 16);
  return r;
}

TEST(GgufErrors, TheValidBaseFileOpens) {
  ScratchDir dir;
  valid_file().save(dir.file("ok.gguf"));
  auto f = GgufFile::open(dir.file("ok.gguf"));
  EXPECT_EQ(f->tensors().size(), 2u);
  EXPECT_EQ(f->find_tensor("b")->offset, 96u);
}

TEST(GgufErrors, MissingEmptyOrNotAFile) {
  ScratchDir dir;
  expect_error(dir.file("absent.gguf"), "cannot open");
  expect_error(dir.path().string(), "not a regular file");
  test::write_bytes(dir.file("empty.gguf"), {});
  expect_error(dir.file("empty.gguf"), "empty file");
}

TEST(GgufErrors, BadMagicAndVersions) {
  RawGguf text;
  text.bytes = {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd', '\n'};
  expect_error(text, "not a GGUF file (bad magic)");
  RawGguf short_file;
  short_file.bytes = {'G', 'G'};
  expect_error(short_file, "not a GGUF file");
  RawGguf v1;
  v1.header(1, 0, 0);
  expect_error(v1, "GGUF version 1 is not supported");
  RawGguf v4;
  v4.header(4, 0, 0);
  expect_error(v4, "unsupported GGUF version 4");
  RawGguf big_endian;
  big_endian.header(0x03000000u, 0, 0);
  expect_error(big_endian, "big-endian");
}

TEST(GgufErrors, EveryTruncationIsReported) {
  ScratchDir dir;
  const RawGguf full = valid_file();
  const std::string path = dir.file("cut.gguf");
  for (size_t n = 0; n < full.bytes.size(); ++n) {
    RawGguf cut;
    cut.bytes.assign(full.bytes.begin(), full.bytes.begin() + long(n));
    cut.save(path);
    SCOPED_TRACE("truncated to " + std::to_string(n) + " bytes");
    expect_error(path, n == 0 ? "empty file" : n < 4 ? "not a GGUF file" : "");
  }
  // Where the cut falls decides what is reported. (Cuts early in a file trip the count checks
  // first, so these files declare few entries.)
  RawGguf cut;
  cut.bytes.assign(full.bytes.begin(), full.bytes.begin() + 10);
  expect_error(cut, "truncated: header");
  RawGguf in_key;
  in_key.header(3, 0, 1).u64(20).zeros(7);
  expect_error(in_key, "truncated: metadata entry 0 needs 20 bytes at offset 32 but only 7 remain");
  RawGguf in_value;
  in_value.header(3, 0, 1).str("general.architecture").u32(kString).u64(100).zeros(50);
  expect_error(in_value, "truncated: key 'general.architecture' needs 100 bytes");
  RawGguf in_info;
  in_info.header(3, 1, 0).str("a_longer_tensor_name").u32(1).u64(4).u32(kF32);
  expect_error(in_info, "truncated: tensor 'a_longer_tensor_name' needs 8 bytes");
  cut.bytes.assign(full.bytes.begin(), full.bytes.end() - 10);
  expect_error(cut, "tensor 'b' data [offset");
  expect_error(cut, "extends past the end of the file (size");
}

TEST(GgufErrors, ImplausibleCounts) {
  RawGguf many_kv;
  many_kv.header(3, 0, uint64_t(1) << 40).zeros(64);
  expect_error(many_kv, "implausible metadata count 1099511627776");
  RawGguf many_tensors;
  many_tensors.header(3, ~uint64_t(0), 0).zeros(64);
  expect_error(many_tensors, "implausible tensor count");
  RawGguf both;  // each count alone fits, together they do not
  both.header(3, 2, 4).zeros(100);
  expect_error(both, "implausible counts");
}

TEST(GgufErrors, StringsAndArraysMustFit) {
  RawGguf long_key;
  long_key.header(3, 0, 1).u64(~uint64_t(0) - 4).zeros(16);
  expect_error(long_key, "truncated: metadata entry 0");
  RawGguf long_value;
  long_value.header(3, 0, 1).str("k").u32(kString).u64(uint64_t(1) << 62).zeros(16);
  expect_error(long_value, "truncated: key 'k'");
  RawGguf long_array;
  long_array.header(3, 0, 1).str("k").u32(kArray).u32(kU32).u64(uint64_t(1) << 61).zeros(16);
  expect_error(long_array, "key 'k': array of 2305843009213693952 u32 values does not fit");
  RawGguf long_string_array;
  long_string_array.header(3, 0, 1).str("k").u32(kArray).u32(kString).u64(1000).zeros(64);
  expect_error(long_string_array, "array of 1000 string values does not fit");
}

TEST(GgufErrors, TooManyArrayValuesInTotal) {
  // 2^22 + 1 one-byte values fit in the file but exceed what the reader expands.
  const uint64_t n = (uint64_t(1) << 22) + 1;
  RawGguf r;
  r.header(3, 0, 1).str("big").u32(kArray).u32(kU8).u64(n).zeros(size_t(n));
  expect_error(r, "key 'big': metadata arrays hold more than 4194304 non-string values");
}

TEST(GgufErrors, NestingDepthIsLimited) {
  auto nested = [](int depth) {
    RawGguf r;
    r.header(3, 0, 1).str("deep").u32(kArray);
    for (int d = 1; d < depth; ++d) r.u32(kArray).u64(1);
    r.u32(kI32).u64(1).u32(7);
    return r;
  };
  ScratchDir dir;
  nested(4).save(dir.file("four.gguf"));
  auto f = GgufFile::open(dir.file("four.gguf"));
  EXPECT_EQ(f->find("deep")->arr[0].arr[0].arr[0].arr[0].i, 7);
  expect_error(nested(5), "key 'deep': arrays nested deeper than 4 levels");
}

TEST(GgufErrors, UnknownValueTypes) {
  RawGguf value;
  value.header(3, 0, 1).str("k").u32(13).u32(0);
  expect_error(value, "key 'k' has unknown value type 13");
  RawGguf element;
  element.header(3, 0, 1).str("k").u32(kArray).u32(99).u64(0);
  expect_error(element, "key 'k': array has unknown element type 99");
  RawGguf flag;
  flag.header(3, 0, 1).str("flag").u32(kBool).u8(2);
  expect_error(flag, "key 'flag': bool value 2 is neither 0 nor 1");
}

TEST(GgufErrors, KeysMustBeUniqueAndNamed) {
  RawGguf dup;
  dup.header(3, 0, 2).kv_u32("general.x", 1).kv_string("general.x", "again");
  expect_error(dup, "duplicate key 'general.x'");
  RawGguf empty;
  empty.header(3, 0, 1).kv_u32("", 1);
  expect_error(empty, "metadata entry 0 has an empty key");
}

TEST(GgufErrors, AlignmentMustBeAU32PowerOfTwo) {
  RawGguf odd;
  odd.header(3, 0, 1).kv_u32("general.alignment", 48);
  expect_error(odd, "general.alignment 48 is not a power of two");
  RawGguf zero;
  zero.header(3, 0, 1).kv_u32("general.alignment", 0);
  expect_error(zero, "general.alignment 0 is not a power of two");
  RawGguf wide;
  wide.header(3, 0, 1).str("general.alignment").u32(kU64).u64(32);
  expect_error(wide, "general.alignment has type u64, expected u32");
}

// A file with one tensor info (after one key) and `data_bytes` of zeroed data.
RawGguf one_tensor(const std::string& name, const std::vector<uint64_t>& dims, uint32_t type, uint64_t offset,
                   size_t data_bytes = 256) {
  RawGguf r;
  r.header(3, 1, 1).kv_string("general.architecture", "test").tensor(name, dims, type, offset);
  r.pad_to(32).zeros(data_bytes);
  return r;
}

TEST(GgufErrors, TensorShapes) {
  expect_error(one_tensor("t", {}, kF32, 0), "tensor 't' has 0 dimensions (expected 1 to 4)");
  expect_error(one_tensor("t", {1, 1, 1, 1, 1}, kF32, 0), "tensor 't' has 5 dimensions");
  expect_error(one_tensor("t", {4, 0}, kF32, 0), "tensor 't' dimension 1 is 0");
  expect_error(one_tensor("t", {uint64_t(1) << 32, uint64_t(1) << 32}, kF32, 0),
               "tensor 't' element count overflows");
  expect_error(one_tensor("t", {uint64_t(1) << 63}, kF32, 0), "element count overflows");
  // 2^61 F32 values: the count fits in int64 but the byte size does not fit in the file.
  expect_error(one_tensor("t", {uint64_t(1) << 61}, kF32, 0), "extends past the end of the file");
  expect_error(one_tensor("w", {48, 2}, kQ4_0, 0), "tensor 'w' row length 48 is not a multiple of the Q4_0 block size 32");
  expect_error(one_tensor("w", {64, 2}, kIQ4_XS, 0), "tensor 'w' row length 64 is not a multiple of the IQ4_XS block size 256");
  expect_error(one_tensor("", {4}, kF32, 0), "tensor 0 has an empty name");
  expect_error(one_tensor(std::string(65, 'n'), {4}, kF32, 0), "tensor 0 name is 65 bytes long");
}

TEST(GgufErrors, TensorTypes) {
  expect_error(one_tensor("t", {32}, 4, 0), "tensor 't' has unknown type 4");
  expect_error(one_tensor("t", {32}, 1000, 0), "tensor 't' has unknown type 1000");
  expect_error(one_tensor("t", {32}, 36, 0), "tensor 't' has unknown type 36");  // after TQ2_0 (35)
  expect_error(one_tensor("t", {32}, 27, 0), "tensor 't' has type I64 (27), which is not supported");
}

TEST(GgufErrors, TensorPlacement) {
  expect_error(one_tensor("t", {4}, kF32, 8), "tensor 't' offset 8 is not a multiple of the alignment 32");
  expect_error(one_tensor("t", {64}, kF32, 0, 100), "tensor 't' data [offset");
  expect_error(one_tensor("t", {64}, kF32, 0, 100), "256 bytes] extends past the end of the file");
  expect_error(one_tensor("t", {4}, kF32, uint64_t(1) << 62),
               "tensor 't' data [data-section offset 4611686018427387904, 16 bytes] extends past the end");

  RawGguf overlap;
  overlap.header(3, 2, 0).tensor("first", {32}, kF32, 0).tensor("second", {8}, kF32, 96);
  overlap.pad_to(32).zeros(256);
  expect_error(overlap, "tensors 'first' [offset 0, 128 bytes] and 'second' [offset 96, 32 bytes] overlap");

  RawGguf dup;
  dup.header(3, 2, 0).tensor("same", {8}, kF32, 0).tensor("same", {8}, kF32, 32);
  dup.pad_to(32).zeros(64);
  expect_error(dup, "duplicate tensor name 'same'");
}

TEST(GgufErrors, CustomAlignmentAppliesToOffsets) {
  RawGguf r;
  r.header(3, 1, 1).kv_u32("general.alignment", 64).tensor("t", {8}, kF32, 32);
  r.pad_to(64).zeros(128);
  expect_error(r, "tensor 't' offset 32 is not a multiple of the alignment 64");
}

TEST(GgufErrors, CorruptedBytesNeverCrash) {
  // A file with every kind of field, then a thousand copies with a few bytes overwritten in the
  // header, metadata and tensor infos: each opens or fails with a GgufError.
  RawGguf r;
  r.header(3, 3, 4).kv_string("general.architecture", "test").kv_u32("general.alignment", 32);
  r.str("arr").u32(kArray).u32(kArray).u64(2);
  r.u32(kI32).u64(2).u32(1).u32(2);
  r.u32(kString).u64(1).str("x");
  r.str("flag").u32(kBool).u8(1);
  r.tensor("w", {32, 2}, kQ8_0, 0).tensor("b", {4}, kF32, 96).tensor("c", {256}, 12, 128);
  r.pad_to(32).zeros(128 + 144);
  const size_t meta_end = r.bytes.size() - 128 - 144;
  ScratchDir dir;
  const std::string path = dir.file("corrupt.gguf");
  r.save(path);
  ASSERT_NO_THROW(GgufFile::open(path));
  uint32_t s = 12345;
  auto next = [&] { return s = s * 1664525u + 1013904223u; };
  int opened = 0, failed = 0;
  for (int iter = 0; iter < 1000; ++iter) {
    RawGguf bad = r;
    const int edits = 1 + int(next() >> 30);
    for (int e = 0; e < edits; ++e) {
      const size_t at = (next() >> 8) % meta_end;
      const uint32_t kind = next() >> 29;
      bad.bytes[at] = kind < 2 ? uint8_t(next() >> 24) : kind < 4 ? 0xff : kind < 6 ? 0x00 : uint8_t(bad.bytes[at] ^ 0x80);
    }
    bad.save(path);
    try {
      GgufFile::open(path);
      ++opened;
    } catch (const GgufError& e) {
      ++failed;
      ASSERT_EQ(std::string(e.what()).rfind(path + ": ", 0), 0u) << e.what();
    }
  }
  EXPECT_GT(failed, 300);
  EXPECT_GT(opened, 0);  // some edits (inside strings) leave a valid file
}

}  // namespace
}  // namespace tllm
