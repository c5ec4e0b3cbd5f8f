// The public API: compile a small ONNX model (built with protobuf here), run it, check results and
// errors.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "kiln/model.h"

namespace {

namespace fs = std::filesystem;

std::string write_model(const fs::path& dir) {
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
  n2->set_op_type("Exp");
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
  EXPECT_THROW(kiln::Model::compile((dir / "missing.onnx").string()), kiln::Error);
  fs::remove_all(dir);
}

}  // namespace
