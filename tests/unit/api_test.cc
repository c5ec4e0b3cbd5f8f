// The public API: compile a small ONNX model (built with protobuf here), run it, check results and
// errors.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "kiln/model.h"

namespace {

// Allocation counting for the run_into test: every operator new of this binary goes through here
// (replacing the global allocator is program-wide; it only counts while `g_counting` is set).
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};

}  // namespace

void* operator new(std::size_t n) {
  if (g_counting) ++g_allocations;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace {

namespace fs = std::filesystem;

// x: f32[n,4] -> Relu -> `second_op` -> y.
std::string write_model(const fs::path& dir, const char* second_op = "Exp") {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(13);
  auto* g = m.mutable_graph();
  g->set_name("g");
  for (const char* name : {"x", "y"}) {
    auto* vi = (std::string(name) == "x" ? g->add_input() : g->add_output());
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_param("n");
    tt->mutable_shape()->add_dim()->set_dim_value(4);
  }
  auto* n1 = g->add_node();
  n1->set_op_type("Relu");
  n1->add_input("x");
  n1->add_output("r");
  auto* n2 = g->add_node();
  n2->set_op_type(second_op);
  n2->add_input("r");
  n2->add_output("y");
  std::string p = (dir / "model.onnx").string();
  std::ofstream f(p, std::ios::binary);
  m.SerializeToOstream(&f);
  return p;
}

TEST(PublicApi, CompileAndRun) {
  fs::path dir = fs::temp_directory_path() / ("kiln_api_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  setenv("XDG_CACHE_HOME", (dir / "cache").c_str(), 1);
  kiln::ModelOptions o;
  o.input_shapes["x"] = {2, 4};
  o.threads = 1;
  kiln::Model m = kiln::Model::compile(write_model(dir), o);
  ASSERT_EQ(m.inputs().size(), 1u);
  EXPECT_EQ(m.inputs()[0].dtype, "f32");
  EXPECT_EQ(m.inputs()[0].shape, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(m.kernel_count(), 1);
  std::vector<float> x = {-1, 0, 1, 2, -3, 0.5f, -0.5f, 3};
  auto out = m.run({{"x", kiln::TensorRef::f32(x.data(), {2, 4})}});
  const float* y = out.at("y").f32();
  for (size_t i = 0; i < x.size(); ++i) EXPECT_FLOAT_EQ(y[i], std::exp(std::max(x[i], 0.0f)));
  EXPECT_THROW(m.run({{"x", kiln::TensorRef::f32(x.data(), {4, 2})}}), kiln::Error);
  // run_into: the same values into a caller buffer, with no allocation during the call.
  std::vector<float> y2(8, -1.0f);
  const std::vector<const void*> ins = {x.data()};
  const std::vector<void*> outs = {y2.data()};
  m.run_into(ins, outs);  // warm: the kernels and OpenMP's thread pool exist after the first run
  g_allocations = 0;
  g_counting = true;
  m.run_into(ins, outs);
  g_counting = false;
  EXPECT_EQ(g_allocations.load(), 0);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y2[i], y[i]);
  EXPECT_THROW(m.run_into({x.data(), x.data()}, outs), kiln::Error);
  EXPECT_THROW(m.run_into({nullptr}, outs), kiln::Error);
  EXPECT_THROW(kiln::Model::compile((dir / "missing.onnx").string()), kiln::Error);
  fs::remove_all(dir);
}

// Each failure says what kind it is (the Python package maps kind() to its exception classes),
// and bind() checks inputs with `kiln run`'s messages, prefixed by the model path.
TEST(PublicApi, ErrorKindsAndBind) {
  fs::path dir = fs::temp_directory_path() / ("kiln_api_kinds_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  setenv("XDG_CACHE_HOME", (dir / "cache").c_str(), 1);
  auto kind_of = [](auto&& f) {
    try {
      f();
    } catch (const kiln::Error& e) {
      return e.kind();
    }
    ADD_FAILURE() << "no kiln::Error thrown";
    return kiln::Error::Kind::Internal;
  };
  const std::string path = write_model(dir);
  kiln::ModelOptions o;
  o.input_shapes["x"] = {2, 4};
  EXPECT_EQ(kind_of([&] { kiln::Model::compile(path); }), kiln::Error::Kind::Model);  // symbolic dim
  EXPECT_EQ(kind_of([&] { kiln::Model::compile((dir / "missing.onnx").string(), o); }), kiln::Error::Kind::Model);
  fs::create_directories(dir / "u");
  const std::string unsupported = write_model(dir / "u", "NoSuchOp");
  EXPECT_EQ(kind_of([&] { kiln::Model::compile(unsupported, o); }), kiln::Error::Kind::UnsupportedOp);
  kiln::ModelOptions bad = o;
  bad.threads = -1;
  EXPECT_EQ(kind_of([&] { kiln::Model::compile(path, bad); }), kiln::Error::Kind::Usage);

  kiln::Model m = kiln::Model::compile(path, o);
  std::vector<float> x(8, 1.0f);
  EXPECT_EQ(m.bind({{"x", kiln::TensorRef::f32(x.data(), {2, 4})}}), (std::vector<const void*>{x.data()}));
  try {
    m.bind({{"x", kiln::TensorRef::f32(x.data(), {4, 2})}});
    ADD_FAILURE() << "a wrong shape was bound";
  } catch (const kiln::Error& e) {
    EXPECT_EQ(e.kind(), kiln::Error::Kind::Model);
    EXPECT_EQ(std::string(e.what()), path + ": input 'x' expects f32[2,4], got f32[4,2]");
  }
  EXPECT_EQ(kind_of([&] { m.bind({}); }), kiln::Error::Kind::Model);
  EXPECT_NE(m.explain_json().find("\"kernels\""), std::string::npos);
  m.save_bundle((dir / "bundle").string());
  EXPECT_TRUE(fs::exists(dir / "bundle" / "kiln_model.c"));
  EXPECT_EQ(kind_of([&] { m.save_bundle((dir / "u").string()); }), kiln::Error::Kind::Usage);  // not empty
  fs::remove_all(dir);
}

}  // namespace
