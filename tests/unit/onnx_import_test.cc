// ONNX frontend: models are built with the protobuf API in the test, written to a temp folder,
// imported, and checked; bad inputs must give one clear line naming what is wrong.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>

#include "frontend/onnx/onnx_import.h"
#include "reference/executor.h"
#include "support/npy.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

class OnnxImportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_import_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    model_.set_ir_version(8);
    auto* op = model_.add_opset_import();
    op->set_domain("");
    op->set_version(13);
    model_.mutable_graph()->set_name("g");
  }
  void TearDown() override { fs::remove_all(dir_); }

  onnx::ValueInfoProto* add_io(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* list, const std::string& name,
                               std::vector<std::string> dims, int elem = onnx::TensorProto::FLOAT) {
    auto* vi = list->Add();
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem);
    auto* shp = tt->mutable_shape();
    for (const auto& d : dims) {
      if (std::isdigit(d[0])) shp->add_dim()->set_dim_value(std::stoll(d));
      else shp->add_dim()->set_dim_param(d);
    }
    return vi;
  }
  onnx::NodeProto* add_node(const std::string& op, std::vector<std::string> ins, std::vector<std::string> outs,
                            const std::string& name = "") {
    auto* n = model_.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (auto& i : ins) n->add_input(i);
    for (auto& o : outs) n->add_output(o);
    return n;
  }
  std::string write(const std::string& file = "model.onnx") {
    std::string p = (dir_ / file).string();
    std::ofstream f(p, std::ios::binary);
    model_.SerializeToOstream(&f);
    return p;
  }
  // Expects import to fail with a UserError whose message contains every piece.
  void expect_error(const std::string& path, const std::vector<std::string>& pieces, ImportOptions opts = {}) {
    try {
      import_onnx(path, opts);
      FAIL() << "import succeeded, expected an error";
    } catch (const UserError& e) {
      std::string msg = e.what();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      for (const auto& p : pieces) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    }
  }

  fs::path dir_;
  onnx::ModelProto model_;
};

TEST_F(OnnxImportTest, ImportsAndRunsASmallGraph) {
  add_io(model_.mutable_graph()->mutable_input(), "x", {"2", "3"});
  add_io(model_.mutable_graph()->mutable_output(), "y", {"2", "3"});
  auto* w = model_.mutable_graph()->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(3);
  for (float f : {1.0f, -2.0f, 3.0f}) w->add_float_data(f);
  add_node("Add", {"x", "w"}, {"s"});
  add_node("Relu", {"s"}, {"y"}, "relu1");
  auto g = import_onnx(write());
  ASSERT_EQ(g->num_nodes(), 2u);
  EXPECT_EQ(g->nodes()[0]->name(), "Add_0");  // unnamed nodes are named <Op>_<index>
  EXPECT_EQ(g->find_value("s")->type().str(), "f32[2,3]");
  auto x = Tensor::from_vector<float>({0, 0, 0, 1, 1, -9}, {2, 3});
  auto out = run_reference(*g, {{"x", x}});
  const float* y = out.at("y").data<float>();
  EXPECT_EQ(std::vector<float>(y, y + 6), (std::vector<float>{1, 0, 3, 2, 0, 0}));
}

// libonnx's shape inference counts a ceil_mode pool's last window even when it starts past the
// input (33 rows, stride 3: 12); ONNX Runtime and the reference drop it (11). The importer types
// the pool and everything after it by the reference's geometry.
TEST_F(OnnxImportTest, CeilModePoolIsTypedByTheWindowsItComputes) {
  add_io(model_.mutable_graph()->mutable_input(), "x", {"1", "1", "33", "66"});
  add_io(model_.mutable_graph()->mutable_output(), "y", {});
  model_.mutable_graph()->mutable_output(0)->mutable_type()->mutable_tensor_type()->clear_shape();
  auto* pool = add_node("MaxPool", {"x"}, {"p"}, "pool");
  auto attr = [&](const char* name, std::vector<int64_t> v) {
    auto* a = pool->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  };
  attr("kernel_shape", {1, 1});
  attr("strides", {3, 1});
  auto* cm = pool->add_attribute();
  cm->set_name("ceil_mode");
  cm->set_type(onnx::AttributeProto::INT);
  cm->set_i(1);
  add_node("Relu", {"p"}, {"y"}, "relu");
  auto g = import_onnx(write());
  EXPECT_EQ(g->find_value("p")->type().str(), "f32[1,1,11,66]");
  EXPECT_EQ(g->find_value("y")->type().str(), "f32[1,1,11,66]");
  auto out = run_reference(*g, {{"x", Tensor(DType::Float32, {1, 1, 33, 66})}});
  EXPECT_EQ(out.at("y").shape(), (Shape{1, 1, 11, 66}));
}

// At opset 13 ReduceSum's axes are an input; an `axes` attribute is not ReduceSum's, and would be
// honoured by shape inference and ignored by the kernel.
TEST_F(OnnxImportTest, AttributeTheOpDoesNotHaveAtThisOpsetIsRejected) {
  add_io(model_.mutable_graph()->mutable_input(), "x", {"130", "7"});
  add_io(model_.mutable_graph()->mutable_output(), "y", {});
  model_.mutable_graph()->mutable_output(0)->mutable_type()->mutable_tensor_type()->clear_shape();
  auto* n = add_node("ReduceSum", {"x"}, {"y"}, "sum");
  auto* a = n->add_attribute();
  a->set_name("axes");
  a->set_type(onnx::AttributeProto::INTS);
  a->add_ints(1);
  expect_error(write(), {"node 'sum'", "ReduceSum", "attribute 'axes' is not defined for ReduceSum at opset 13"});
}

// A graph output's declared shape is a hint (ONNX Runtime warns and runs with the computed shape):
// an Add of two [3] inputs declared f32[2,3] is f32[3], not an internal error in a later stage
// that trusted the declaration (the fuzzer's add_declared_output_shape_wrong_internal_error).
TEST_F(OnnxImportTest, DeclaredOutputShapeContradictingTheGraphGivesWayToTheComputedOne) {
  add_io(model_.mutable_graph()->mutable_input(), "x", {"3"});
  add_io(model_.mutable_graph()->mutable_output(), "y", {"2", "3"});
  add_node("Add", {"x", "x"}, {"y"}, "add");
  ImportOptions io;
  std::vector<std::string> warnings;
  io.warn = [&](const std::string& w) { warnings.push_back(w); };
  auto g = import_onnx(write(), io);
  EXPECT_EQ(g->find_value("y")->type().str(), "f32[3]");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("graph output 'y' is declared f32[2,3], but the graph computes f32[3]"), std::string::npos)
      << warnings[0];
  auto out = run_reference(*g, {{"x", Tensor::from_vector<float>({1, 2, 3}, {3})}});
  EXPECT_EQ(out.at("y").shape(), (Shape{3}));
}

// The same when ONNX's inference cannot type the output (an opset-6 Add of scalar constants: only
// its element type) and kiln's kernel types it.
TEST_F(OnnxImportTest, DeclaredOutputShapeOfAnOutputOnlyKilnCanTypeGivesWayToo) {
  model_.mutable_opset_import(0)->set_version(6);
  add_io(model_.mutable_graph()->mutable_output(), "y", {"2", "3"}, onnx::TensorProto::DOUBLE);
  auto* c = model_.mutable_graph()->add_initializer();
  c->set_name("c");
  c->set_data_type(onnx::TensorProto::DOUBLE);
  c->add_double_data(1.5);
  add_node("Add", {"c", "c"}, {"y"}, "add");
  auto g = import_onnx(write());
  EXPECT_EQ(g->find_value("y")->type().str(), "f64[]");
}

// A declared element type the graph contradicts is refused, as ONNX Runtime refuses it.
TEST_F(OnnxImportTest, DeclaredOutputElementTypeContradictingTheGraphIsRejected) {
  add_io(model_.mutable_graph()->mutable_input(), "x", {"3"});
  add_io(model_.mutable_graph()->mutable_output(), "y", {"3"}, onnx::TensorProto::INT64);
  add_node("Relu", {"x"}, {"y"}, "relu");
  expect_error(write(), {"graph output 'y' is declared i64[3], but the graph computes f32"});
}

// Where nothing but the declaration can type an output (Expand to a shape that is a graph input,
// data-dependent), the declaration still types it.
TEST_F(OnnxImportTest, DeclaredOutputShapeTypesAnOutputNothingElseCan) {
  add_io(model_.mutable_graph()->mutable_input(), "x", {"1", "3"});
  add_io(model_.mutable_graph()->mutable_input(), "s", {"2"}, onnx::TensorProto::INT64);
  add_io(model_.mutable_graph()->mutable_output(), "y", {"4", "3"});
  add_node("Expand", {"x", "s"}, {"y"}, "expand");
  auto g = import_onnx(write());
  EXPECT_EQ(g->find_value("y")->type().str(), "f32[4,3]");
}

TEST_F(OnnxImportTest, TruncatedFileIsMalformed) {
  add_io(model_.mutable_graph()->mutable_input(), "x", {"2"});
  add_io(model_.mutable_graph()->mutable_output(), "y", {"2"});
  add_node("Relu", {"x"}, {"y"});
  std::string p = write();
  auto size = fs::file_size(p);
  fs::resize_file(p, size / 2);
  expect_error(p, {"model.onnx", "not a valid ONNX model"});
}

TEST_F(OnnxImportTest, MissingFile) { expect_error((dir_ / "nope.onnx").string(), {"nope.onnx", "no such model file"}); }

TEST_F(OnnxImportTest, UnsupportedOpNamesNodeOpAndOpset) {
  add_io(model_.mutable_graph()->mutable_input(), "x", {"2"});
  add_io(model_.mutable_graph()->mutable_output(), "y", {"2"});
  add_node("NonMaxSuppression", {"x"}, {"y"}, "nms");
  expect_error(write(), {"model.onnx", "node 'nms'", "NonMaxSuppression", "opset 13", "unsupported op"});
}

TEST_F(OnnxImportTest, SymbolicDimWithoutInputShape) {
  add_io(model_.mutable_graph()->mutable_input(), "x", {"batch", "3"});
  add_io(model_.mutable_graph()->mutable_output(), "y", {"batch", "3"});
  add_node("Relu", {"x"}, {"y"});
  std::string p = write();
  expect_error(p, {"input 'x'", "symbolic dimension 'batch'", "axis 0", "--input-shape"});
  ImportOptions o;
  o.input_shapes["x"] = {4, 3};
  auto g = import_onnx(p, o);
  EXPECT_EQ(g->outputs()[0]->type().str(), "f32[4,3]");
  o.input_shapes["x"] = {4, 5};
  expect_error(p, {"disagrees", "axis 1"}, o);
  ImportOptions bad;
  bad.input_shapes["nope"] = {1};
  bad.input_shapes["x"] = {1, 3};
  expect_error(p, {"'nope'", "not an input"}, bad);
}

// Paddle (and other exporters) write an unknown dim as dim_value -1: it is symbolic, like a
// named dim. Without --input-shape the error names the input and the axis; with it the model
// imports, also when value_info and the output declare -1 (shape inference fills them in).
TEST_F(OnnxImportTest, NegativeOneDimIsSymbolic) {
  auto* x = add_io(model_.mutable_graph()->mutable_input(), "x", {"1", "3"});
  x->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)->set_dim_value(-1);
  auto* y = add_io(model_.mutable_graph()->mutable_output(), "y", {"1", "3"});
  y->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)->set_dim_value(-1);
  auto* r = add_io(model_.mutable_graph()->mutable_value_info(), "r", {"1", "3"});
  r->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)->set_dim_value(-1);
  add_node("Relu", {"x"}, {"r"});
  add_node("Neg", {"r"}, {"y"});
  std::string p = write();
  expect_error(p, {"input 'x'", "symbolic dimension -1", "axis 0", "--input-shape x="});
  ImportOptions o;
  o.input_shapes["x"] = {5, 3};
  auto g = import_onnx(p, o);
  EXPECT_EQ(g->find_value("r")->type().str(), "f32[5,3]");
  EXPECT_EQ(g->outputs()[0]->type().str(), "f32[5,3]");
  auto in = Tensor::from_vector<float>(std::vector<float>(15, -2.0f), {5, 3});
  auto out = run_reference(*g, {{"x", in}});
  EXPECT_EQ(out.at("y").as_double(14), -0.0);
  // A fixed axis must still agree with --input-shape; only the -1 axis is free.
  o.input_shapes["x"] = {5, 4};
  expect_error(p, {"disagrees", "axis 1"}, o);
}

TEST_F(OnnxImportTest, ExternalDataInsideFolderLoads) {
  add_io(model_.mutable_graph()->mutable_input(), "x", {"2"});
  add_io(model_.mutable_graph()->mutable_output(), "y", {"2"});
  auto* w = model_.mutable_graph()->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(2);
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* kv = w->add_external_data();
  kv->set_key("location");
  kv->set_value("weights.bin");
  float data[2] = {1.5f, -2.0f};
  std::ofstream(dir_ / "weights.bin", std::ios::binary).write(reinterpret_cast<char*>(data), 8);
  add_node("Mul", {"x", "w"}, {"y"});
  auto g = import_onnx(write());
  const Tensor& t = g->find_value("w")->constant();
  EXPECT_EQ(t.data<float>()[0], 1.5f);
  EXPECT_EQ(t.data<float>()[1], -2.0f);
}

TEST_F(OnnxImportTest, ExternalDataEscapingFolderIsRejected) {
  add_io(model_.mutable_graph()->mutable_input(), "x", {"2"});
  add_io(model_.mutable_graph()->mutable_output(), "y", {"2"});
  auto* w = model_.mutable_graph()->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(2);
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* kv = w->add_external_data();
  kv->set_key("location");
  kv->set_value("../secret.bin");
  add_node("Mul", {"x", "w"}, {"y"});
  expect_error(write(), {"initializer 'w'", "escapes the model's folder"});
  kv->set_value("/etc/passwd");
  expect_error(write(), {"initializer 'w'", "absolute"});
}

TEST_F(OnnxImportTest, WrongInputShapeAtRunTime) {
  add_io(model_.mutable_graph()->mutable_input(), "x", {"2", "3"});
  add_io(model_.mutable_graph()->mutable_output(), "y", {"2", "3"});
  add_node("Relu", {"x"}, {"y"});
  auto g = import_onnx(write());
  try {
    run_reference(*g, {{"x", Tensor(DType::Float32, {3, 2})}});
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("input 'x' expects f32[2,3], got f32[3,2]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(run_reference(*g, {{"x", Tensor(DType::Float64, {2, 3})}}), UserError);
  EXPECT_THROW(run_reference(*g, {}), UserError);
}

TEST_F(OnnxImportTest, LegacyOpsAreCanonicalised) {
  // Opset 9: Unsqueeze axes and Softmax(axis=1 on rank 3) flattening semantics.
  model_.mutable_opset_import(0)->set_version(9);
  add_io(model_.mutable_graph()->mutable_input(), "x", {"2", "3", "4"});
  add_io(model_.mutable_graph()->mutable_output(), "y", {"2", "3", "4"});
  auto* n = add_node("Softmax", {"x"}, {"y"}, "sm");
  auto* a = n->add_attribute();
  a->set_name("axis");
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(1);
  auto g = import_onnx(write());
  std::vector<std::string> ops;
  for (Node* m : g->nodes()) ops.push_back(m->op_type());
  EXPECT_EQ(ops, (std::vector<std::string>{"Reshape", "Softmax", "Reshape"}));
  EXPECT_EQ(g->nodes()[1]->input(0)->type().str(), "f32[2,12]");
}

TEST(Npy, RoundTrip) {
  auto p = (fs::temp_directory_path() / ("kiln_npy_" + std::to_string(::getpid()) + ".npy")).string();
  auto t = Tensor::from_vector<int64_t>({1, -2, 3, 4, 5, 6}, {2, 3});
  write_npy(p, t);
  Tensor r = read_npy(p);
  EXPECT_TRUE(r.bitwise_equal(t));
  write_npy(p, Tensor::scalar<float>(2.5f));
  EXPECT_EQ(read_npy(p).shape(), Shape{});
  std::ofstream(p, std::ios::trunc) << "garbage";
  EXPECT_THROW(read_npy(p), UserError);
  fs::remove(p);
}

}  // namespace
}  // namespace kiln
