// The measurement wire format (tune/measure_wire.h): requests and results round-trip exactly, with
// every dtype, empty, scalar and undefined tensors; shared tensors are stored once; a request that
// went through bytes measures like the original; and a truncated, corrupted, foreign or crafted
// file is one UserError naming the file, never a crash or a wrong request.
#include <gtest/gtest.h>

#include <unistd.h>

#include <bit>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "tune/measure_wire.h"
#include "tune/measurer.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// A tensor of `dt` whose bytes are a fixed pattern (every byte value appears), so that a
// round-trip that drops or reorders bytes shows.
Tensor pattern(DType dt, Shape shape, unsigned seed) {
  Tensor t(dt, std::move(shape));
  auto* p = static_cast<uint8_t*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = uint8_t(i * 131 + seed * 17 + 5);
  if (dt == DType::Bool)  // a bool is 0 or 1
    for (size_t i = 0; i < t.nbytes(); ++i) p[i] &= 1;
  return t;
}

const std::vector<DType> kAllDtypes = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16,
                                       DType::Int8,    DType::Int16,   DType::Int32,   DType::Int64,
                                       DType::UInt8,   DType::UInt16,  DType::UInt32,  DType::UInt64,
                                       DType::Bool};

tune::MeasureRequest sample_request() {
  tune::MeasureRequest r;
  std::string first = "void k0(void* const* a) {}\n/* a NUL: */";
  first += std::string(1, '\0');
  first += "\xff\x01 and the rest\n";
  r.sources = {first, "", "void k1(void* const* a) {}\n"};
  r.kernels = {"k0", "k1", "k_empty"};
  std::vector<Tensor> every;
  unsigned seed = 1;
  for (DType dt : kAllDtypes) every.push_back(pattern(dt, {2, 3}, seed++));
  r.arguments.push_back(every);
  r.arguments.push_back({pattern(DType::Float32, {0}, 9), pattern(DType::Int64, {2, 0, 3}, 9),
                         pattern(DType::Float32, {}, 4), Tensor(), every[0]});
  r.arguments.push_back({});
  r.reference = {pattern(DType::Float32, {4, 5}, 7), pattern(DType::Bool, {3}, 8), pattern(DType::UInt8, {0, 2}, 2)};
  r.tolerance = 3.5e-5;
  r.threads = 3;
  r.compile.compiler = "gcc-12";
  r.compile.flags = {"-O2", "", "-march=x86-64-v3"};
  r.protocol = {4, 9, 0.25, 77};
  return r;
}

void expect_same_tensors(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].defined(), b[i].defined()) << i;
    if (!a[i].defined()) continue;
    EXPECT_TRUE(a[i].bitwise_equal(b[i])) << i << ": " << TensorType{a[i].dtype(), a[i].shape()}.str() << " vs "
                                          << TensorType{b[i].dtype(), b[i].shape()}.str();
  }
}

TEST(MeasureWire, RequestRoundTripsEveryField) {
  const tune::MeasureRequest r = sample_request();
  const tune::MeasureRequest q = tune::parse_request(tune::serialize_request(r), "request.bin");
  EXPECT_EQ(q.sources, r.sources);
  EXPECT_EQ(q.kernels, r.kernels);
  ASSERT_EQ(q.arguments.size(), r.arguments.size());
  for (size_t c = 0; c < r.arguments.size(); ++c) expect_same_tensors(q.arguments[c], r.arguments[c]);
  expect_same_tensors(q.reference, r.reference);
  EXPECT_EQ(q.tolerance, r.tolerance);
  EXPECT_EQ(q.threads, r.threads);
  EXPECT_EQ(q.compile.compiler, r.compile.compiler);
  EXPECT_EQ(q.compile.flags, r.compile.flags);
  EXPECT_EQ(q.protocol.warmup, 4);
  EXPECT_EQ(q.protocol.samples, 9);
  EXPECT_EQ(q.protocol.min_sample_ms, 0.25);
  EXPECT_EQ(q.protocol.max_calls_per_sample, 77);
  // Every dtype came back as itself.
  for (size_t i = 0; i < kAllDtypes.size(); ++i) EXPECT_EQ(q.arguments[0][i].dtype(), kAllDtypes[i]);
  // Serialising the parsed request gives the same bytes: nothing was lost or reordered.
  EXPECT_EQ(tune::serialize_request(q), tune::serialize_request(r));
}

TEST(MeasureWire, EqualTensorsAreStoredOnce) {
  tune::MeasureRequest r;
  const Tensor big = pattern(DType::Float32, {256, 64}, 3);
  for (int c = 0; c < 8; ++c) {
    r.kernels.push_back("k" + std::to_string(c));
    r.arguments.push_back({big, big.clone()});  // equal content, distinct storage: still one entry
  }
  r.reference = {big};
  r.compile.compiler = "cc";
  const std::string bytes = tune::serialize_request(r);
  EXPECT_LT(bytes.size(), big.nbytes() + 4096);
  const tune::MeasureRequest q = tune::parse_request(bytes, "r");
  for (const auto& list : q.arguments) expect_same_tensors(list, {big, big});
}

TEST(MeasureWire, ResultRoundTripsIncludingNonFiniteTimes) {
  tune::MeasureResult r;
  r.candidates.resize(3);
  r.candidates[0] = {true, "", 0.0123, 0, {0.012, 0.0123, 0.013}};
  r.candidates[1] = {false, "output 0 differs from the default schedule's by inf (tolerance 0.0001)", 0, INFINITY, {}};
  r.candidates[2] = {true, "", 1e-9, 3e-6, {NAN, 1e300}};
  r.compile_s = 1.25;
  r.run_s = 0.5;
  r.machine = "AMD EPYC 9R14|avx512f,avx2,fma";
  const tune::MeasureResult q = tune::parse_result(tune::serialize_result(r), "result.bin");
  ASSERT_EQ(q.candidates.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(q.candidates[i].ok, r.candidates[i].ok);
    EXPECT_EQ(q.candidates[i].error, r.candidates[i].error);
    EXPECT_EQ(std::bit_cast<uint64_t>(q.candidates[i].median_ms), std::bit_cast<uint64_t>(r.candidates[i].median_ms));
    EXPECT_EQ(std::bit_cast<uint64_t>(q.candidates[i].max_rel_diff),
              std::bit_cast<uint64_t>(r.candidates[i].max_rel_diff));
    ASSERT_EQ(q.candidates[i].samples.size(), r.candidates[i].samples.size());
    for (size_t k = 0; k < r.candidates[i].samples.size(); ++k)
      EXPECT_EQ(std::bit_cast<uint64_t>(q.candidates[i].samples[k]), std::bit_cast<uint64_t>(r.candidates[i].samples[k]));
  }
  EXPECT_EQ(q.compile_s, 1.25);
  EXPECT_EQ(q.run_s, 0.5);
  EXPECT_EQ(q.machine, r.machine);
  EXPECT_EQ(tune::parse_result(tune::serialize_result({}), "r").candidates.size(), 0u);
}

// The message of the UserError `f` throws ("" when it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(MeasureWire, EveryTruncationAndEveryFlippedByteIsAClearError) {
  const std::string bytes = tune::serialize_request(sample_request());
  for (size_t n = 0; n < bytes.size(); ++n) {
    const std::string msg = error_of([&] { tune::parse_request(std::string_view(bytes).substr(0, n), "cut.bin"); });
    ASSERT_NE(msg.find("cut.bin: not a valid kiln measurement request"), std::string::npos) << n << ": " << msg;
    ASSERT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] = char(bad[i] ^ 0x10);
    const std::string msg = error_of([&] { tune::parse_request(bad, "flip.bin"); });
    ASSERT_NE(msg.find("flip.bin: not a valid kiln measurement request"), std::string::npos) << i << ": " << msg;
  }
  std::string longer = bytes + "x";
  EXPECT_NE(error_of([&] { tune::parse_request(longer, "f"); }), "");
  // A result is not a request, and another version is named as such.
  EXPECT_NE(error_of([&] { tune::parse_request(tune::serialize_result({}), "f"); }).find("no kiln header"),
            std::string::npos);
  std::string v1 = bytes;
  v1[7] = 1;  // the one-source requests of earlier kilns
  EXPECT_NE(error_of([&] { tune::parse_request(v1, "f"); }).find("format version 1, this kiln reads version 2"),
            std::string::npos);
  const std::string res = tune::serialize_result({{{true, "", 1, 0, {1}}}, 0, 0, "cpu|isa"});
  for (size_t n = 0; n < res.size(); ++n)
    EXPECT_NE(error_of([&] { tune::parse_result(std::string_view(res).substr(0, n), "r"); }), "") << n;
}

// FNV-1a as the format defines it, to craft files whose checksum is right but whose body is not.
std::string with_checksum(std::string body) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : body) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  for (int i = 0; i < 8; ++i) body.push_back(char((h >> (8 * i)) & 0xff));
  return body;
}

std::string u64le(uint64_t v) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(char((v >> (8 * i)) & 0xff));
  return s;
}

TEST(MeasureWire, CraftedBodiesWithAGoodChecksumAreRefusedBeforeAllocating) {
  const std::string magic("KILNMRQ\x02", 8);
  // A table claiming 2^60 tensors; a tensor claiming a huge shape; an unknown dtype; a bad index.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {magic + u64le(uint64_t(1) << 60), "exceeds the file"},
      {magic + u64le(1) + std::string(1, char(DType::Float32)) + std::string("\x02\0\0\0", 4) + u64le(1 << 30) +
           u64le(1 << 30) + u64le(uint64_t(1) << 62),
       "declares"},
      {magic + u64le(1) + std::string(1, char(77)) + std::string(4, '\0') + u64le(0), "unknown dtype code 77"},
  };
  for (const auto& c : cases) {
    const std::string msg = error_of([&] { tune::parse_request(with_checksum(c.first), "crafted.bin"); });
    EXPECT_NE(msg.find(c.second), std::string::npos) << msg;
  }
  // Index 5 into a table of none.
  tune::MeasureRequest r;
  r.kernels = {"k"};
  r.arguments = {{pattern(DType::Int32, {2}, 1)}};
  r.compile.compiler = "cc";
  std::string b = tune::serialize_request(r);
  b.resize(b.size() - 8);
  // The table (count 1 + the tensor: 1 + 4 + 8 + 8 + 8 bytes), the sources (8: an empty list), the kernels
  // (8 + 8 + 1), the argument lists (8), the first list's count (8): its index comes next.
  const size_t at = 8 + 8 + 29 + 8 + 17 + 8 + 8;
  b.replace(at, 8, u64le(5));
  EXPECT_NE(error_of([&] { tune::parse_request(with_checksum(b), "crafted.bin"); }).find("tensor index 5 of a table of 1"),
            std::string::npos);
}

TEST(MeasureWire, FilesAreWrittenWholeAndReadBack) {
  const fs::path dir = fs::temp_directory_path() / ("kiln_wire_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "req.bin").string();
  const std::string bytes = tune::serialize_request(sample_request());
  tune::write_file_atomically(path, bytes);
  EXPECT_EQ(tune::read_file_bytes(path), bytes);
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 1u);  // no temporary left beside it
  EXPECT_NE(error_of([&] { tune::read_file_bytes((dir / "missing.bin").string()); }).find("cannot open"), std::string::npos);
  EXPECT_NE(error_of([&] { tune::read_file_bytes(dir.string()); }).find("is a folder"), std::string::npos);
  EXPECT_NE(error_of([&] { tune::write_file_atomically((dir / "no" / "such" / "dir.bin").string(), "x"); }), "");
  fs::remove_all(dir);
}

// A request measured after a trip through bytes: the serialised form is all a worker needs. Its
// two candidates are in two sources, compiled by two compiler processes and found in either object.
TEST(MeasureWire, ARequestMeasuresTheSameAfterTheTrip) {
  tune::MeasureRequest r;
  r.sources = {"void kiln_set_num_threads(int n) { (void)n; }\n"
               "void twice(void* const* a) { const float* x = a[0]; float* y = a[1];\n"
               "  for (int i = 0; i < 64; ++i) y[i] = 2 * x[i]; }\n",
               "void kiln_set_num_threads(int n) { (void)n; }\n"
               "void wrong(void* const* a) { const float* x = a[0]; float* y = a[1];\n"
               "  for (int i = 0; i < 64; ++i) y[i] = 3 * x[i]; }\n"};
  Tensor x(DType::Float32, {64}), y(DType::Float32, {64});
  for (int i = 0; i < 64; ++i) {
    x.data<float>()[i] = float(i) - 20.5f;
    y.data<float>()[i] = 2 * x.data<float>()[i];
  }
  r.kernels = {"twice", "wrong"};
  r.arguments = {{x}, {x}};
  r.reference = {y};
  r.protocol.samples = 3;
  const tune::MeasureRequest q = tune::parse_request(tune::serialize_request(r), "r");
  tune::LocalMeasurer local(2);
  const tune::MeasureResult res = tune::parse_result(tune::serialize_result(local.measure(q)), "res");
  ASSERT_EQ(res.candidates.size(), 2u);
  EXPECT_TRUE(res.candidates[0].ok) << res.candidates[0].error;
  EXPECT_GT(res.candidates[0].median_ms, 0);
  EXPECT_EQ(res.candidates[0].samples.size(), 3u);
  EXPECT_FALSE(res.candidates[1].ok);
  EXPECT_NE(res.candidates[1].error.find("differs"), std::string::npos);
  EXPECT_EQ(res.machine, tune::measuring_machine());
}

}  // namespace
}  // namespace kiln
