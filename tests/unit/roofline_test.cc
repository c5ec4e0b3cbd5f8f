// The roofline's counting rules (node_flops per op kind: a multiply-add is 2 FLOPs, every other
// arithmetic op on an element 1), the placement of a kernel under the roof (bound, percent of roof),
// the report's totals and shares, and the JSON/SVG outputs, on tiny graphs with chosen times.
#include <gtest/gtest.h>

#include "analysis/roofline.h"
#include "fusion/cost_model.h"
#include "ir/parser.h"

namespace kiln {
namespace {

std::unique_ptr<Graph> ir(const std::string& body, const std::string& inputs, const std::string& outputs) {
  return parse_graph("graph main opset 17 (" + inputs + ") -> (" + outputs + ") {\n" + body + "}\n");
}

// FLOPs of the graph's only (or last) node.
double flops_of(const std::string& node, const std::string& inputs) {
  auto g = ir("  " + node + " name=\"n\"\n", inputs, "%y");
  return node_flops(*g->nodes().back());
}

TEST(RooflineFlops, MatMulIsTwoPerMultiplyAdd) {
  EXPECT_EQ(flops_of("%y: f32[3,5] = MatMul(%a, %b)", "%a: f32[3,4], %b: f32[4,5]"), 2.0 * 3 * 5 * 4);
  // Batched: every batch's M*N*K.
  EXPECT_EQ(flops_of("%y: f32[2,3,5] = MatMul(%a, %b)", "%a: f32[2,3,4], %b: f32[4,5]"), 2.0 * 2 * 3 * 5 * 4);
  // Vector times matrix: K is the vector's length.
  EXPECT_EQ(flops_of("%y: f32[5] = MatMul(%a, %b)", "%a: f32[4], %b: f32[4,5]"), 2.0 * 5 * 4);
}

TEST(RooflineFlops, GemmTransposedAAndBias) {
  // transA: A is [K, M], so K is its first dim; the bias adds one FLOP per output.
  EXPECT_EQ(flops_of("%y: f32[3,5] = Gemm(%a, %b, %c) {transA=1}", "%a: f32[7,3], %b: f32[7,5], %c: f32[5]"),
            2.0 * 3 * 5 * 7 + 3 * 5);
  EXPECT_EQ(flops_of("%y: f32[3,5] = Gemm(%a, %b)", "%a: f32[3,7], %b: f32[7,5]"), 2.0 * 3 * 5 * 7);
}

TEST(RooflineFlops, ConvStridesGroupsAndBias) {
  // 3x3, stride 2, pad 1: 8 -> 4; each output Cin * 9 multiply-adds, plus the bias.
  EXPECT_EQ(flops_of("%y: f32[1,6,4,4] = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1], strides=[2,2]}",
                     "%x: f32[1,4,8,8], %w: f32[6,4,3,3], %b: f32[6]"),
            2.0 * 96 * 4 * 9 + 96);
  // Depthwise (group = channels): W is [C, 1, 3, 3], 9 multiply-adds per output, no bias.
  EXPECT_EQ(flops_of("%y: f32[2,8,6,6] = Conv(%x, %w) {group=8, kernel_shape=[3,3]}",
                     "%x: f32[2,8,8,8], %w: f32[8,1,3,3]"),
            2.0 * (2 * 8 * 36) * 9);
  // Two groups of 2 input channels each.
  EXPECT_EQ(flops_of("%y: f32[1,4,8,8] = Conv(%x, %w) {group=2, kernel_shape=[1,1]}", "%x: f32[1,4,8,8], %w: f32[4,2,1,1]"),
            2.0 * 256 * 2);
}

TEST(RooflineFlops, ConvTransposeScattersEveryInput) {
  // W is [Cin, Cout/group, k, k]: each input element meets Cout * 4 weights; then the bias.
  EXPECT_EQ(flops_of("%y: f32[1,3,8,8] = ConvTranspose(%x, %w, %b) {kernel_shape=[2,2], strides=[2,2]}",
                     "%x: f32[1,2,4,4], %w: f32[2,3,2,2], %b: f32[3]"),
            2.0 * 32 * 3 * 4 + 192);
}

TEST(RooflineFlops, ElementwiseOnePerOperation) {
  EXPECT_EQ(flops_of("%y: f32[4,8] = Exp(%x)", "%x: f32[4,8]"), 32);
  EXPECT_EQ(flops_of("%y: f32[4,8] = Add(%a, %b)", "%a: f32[4,8], %b: f32[4,8]"), 32);
  // Broadcast: one per output element.
  EXPECT_EQ(flops_of("%y: f32[4,8] = Mul(%a, %b)", "%a: f32[4,8], %b: f32[8]"), 32);
  EXPECT_EQ(flops_of("%y: f32[4,8] = Sum(%a, %b, %c)", "%a: f32[4,8], %b: f32[4,8], %c: f32[4,8]"), 64);
  EXPECT_EQ(flops_of("%y: f32[4,8] = Mean(%a, %b, %c)", "%a: f32[4,8], %b: f32[4,8], %c: f32[4,8]"), 96);
  EXPECT_EQ(flops_of("%y: f32[4,8] = Clip(%x, %lo, %hi)", "%x: f32[4,8], %lo: f32[], %hi: f32[]"), 64);
  EXPECT_EQ(flops_of("%y: f32[4,8] = Where(%c, %a, %b)", "%c: bool[4,8], %a: f32[4,8], %b: f32[4,8]"), 32);
  EXPECT_EQ(flops_of("%y: i64[4,8] = Cast(%x) {to=7}", "%x: f32[4,8]"), 0);
}

TEST(RooflineFlops, ReductionsCombineEveryInputOnce) {
  const std::string x = "%x: f32[4,8], %ax: i64[1]";
  EXPECT_EQ(flops_of("%y: f32[4,1] = ReduceSum(%x, %ax) {keepdims=1}", x), 32);
  EXPECT_EQ(flops_of("%y: f32[4,1] = ReduceMax(%x, %ax) {keepdims=1}", x), 32);
  EXPECT_EQ(flops_of("%y: f32[4,1] = ReduceMean(%x, %ax) {keepdims=1}", x), 32 + 4);  // + a division per output
  EXPECT_EQ(flops_of("%y: f32[4,1] = ReduceSumSquare(%x, %ax) {keepdims=1}", x), 64);
  EXPECT_EQ(flops_of("%y: f32[4,1] = ReduceL2(%x, %ax) {keepdims=1}", x), 64 + 4);  // + a square root
  EXPECT_EQ(flops_of("%y: f32[1,3,1,1] = GlobalAveragePool(%x)", "%x: f32[1,3,5,5]"), 75 + 3);
  EXPECT_EQ(flops_of("%y: f32[1,3,1,1] = GlobalMaxPool(%x)", "%x: f32[1,3,5,5]"), 75);
}

TEST(RooflineFlops, PoolsCountEveryWindowPosition) {
  // 3x3 stride 2 pad 1 on 8x8: 4x4 outputs, 9 positions each (padded ones too).
  EXPECT_EQ(flops_of("%y: f32[1,2,4,4] = MaxPool(%x) {kernel_shape=[3,3], pads=[1,1,1,1], strides=[2,2]}",
                     "%x: f32[1,2,8,8]"),
            32 * 9);
  EXPECT_EQ(flops_of("%y: f32[1,2,7,7] = AveragePool(%x) {kernel_shape=[2,2]}", "%x: f32[1,2,8,8]"), 98 * 4);
}

TEST(RooflineFlops, DataMovementIsFree) {
  EXPECT_EQ(flops_of("%y: f32[8,4] = Transpose(%x) {perm=[1,0]}", "%x: f32[4,8]"), 0);
  EXPECT_EQ(flops_of("%y: f32[4,16] = Concat(%a, %b) {axis=1}", "%a: f32[4,8], %b: f32[4,8]"), 0);
}

TEST(Roofline, RoofForThreads) {
  analysis::MachineModel m;
  m.threads = 4;
  m.peak_gflops_1t = 100, m.peak_gflops_nt = 350;
  m.dram_1t.triad_gbps = 20, m.dram_nt.triad_gbps = 40;
  auto one = analysis::roof_for(m, 1);
  EXPECT_EQ(one.peak_gflops, 100);
  EXPECT_EQ(one.dram_gbps, 20);
  EXPECT_EQ(one.ridge(), 5);
  auto all = analysis::roof_for(m, 4);
  EXPECT_EQ(all.peak_gflops, 350);
  EXPECT_EQ(all.dram_gbps, 40);
  auto two = analysis::roof_for(m, 2);  // peak scales with the threads, capped at the probed N
  EXPECT_EQ(two.peak_gflops, 200);
  EXPECT_EQ(two.dram_gbps, 40);
  EXPECT_EQ(two.threads, 2);
}

TEST(Roofline, PlaceKernelBoundAndPercent) {
  analysis::Roof roof{/*peak_gflops=*/100, /*dram_gbps=*/10, /*threads=*/1};  // ridge 10 FLOP/B
  // 1e6 FLOPs over 1e5 bytes: intensity exactly the ridge point counts as compute-bound.
  auto c = analysis::place_kernel("c", 1e6, 100000, 0.02, roof);
  EXPECT_FALSE(c.memory_bound);
  EXPECT_DOUBLE_EQ(c.intensity, 10);
  EXPECT_DOUBLE_EQ(c.gflops, 50);
  EXPECT_DOUBLE_EQ(c.roof_gflops, 100);
  EXPECT_DOUBLE_EQ(c.percent_of_roof, 50);
  // Below the ridge: the roof is bandwidth × intensity; percent = attained GB/s / bandwidth.
  auto m = analysis::place_kernel("m", 1e5, 400000, 0.1, roof);
  EXPECT_TRUE(m.memory_bound);
  EXPECT_DOUBLE_EQ(m.intensity, 0.25);
  EXPECT_DOUBLE_EQ(m.roof_gflops, 2.5);
  EXPECT_DOUBLE_EQ(m.gbps, 4);
  EXPECT_DOUBLE_EQ(m.percent_of_roof, 40);
  EXPECT_NEAR(m.percent_of_roof, 100 * m.gflops / m.roof_gflops, 1e-9);
  // Pure data movement: no FLOPs, still a bandwidth percentage.
  auto t = analysis::place_kernel("t", 0, 1000000, 0.2, roof);
  EXPECT_TRUE(t.memory_bound);
  EXPECT_EQ(t.gflops, 0);
  EXPECT_DOUBLE_EQ(t.percent_of_roof, 50);
  // An untimed kernel attains nothing rather than dividing by zero.
  auto z = analysis::place_kernel("z", 1e6, 1000, 0, roof);
  EXPECT_EQ(z.gflops, 0);
  EXPECT_EQ(z.percent_of_roof, 0);
}

// x[8,64] @ w[64,32] then Relu, built without code generation (library kernels; the times are
// chosen, not measured).
std::unique_ptr<runtime::Executable> tiny(bool fused) {
  auto g = ir("  %m: f32[8,32] = MatMul(%x, %w) name=\"mm\"\n  %y: f32[8,32] = Relu(%m) name=\"relu\"\n",
              "%x: f32[8,64], %w: f32[64,32]", "%y");
  runtime::BuildOptions o;
  o.generate_code = false;
  o.fusion.enabled = fused;
  o.threads = 1;
  return runtime::Executable::build(std::move(g), o);
}

TEST(Roofline, ReportTotalsSharesAndOrder) {
  auto ex = tiny(/*fused=*/false);
  ASSERT_EQ(ex->plan().groups.size(), 2u);
  analysis::Roof roof{10, 10, 1};  // ridge 1 FLOP/B
  // MatMul: 32768 FLOPs, (512 + 2048 + 256) * 4 = 11264 B; Relu: 256 FLOPs, 2048 B.
  auto r = analysis::roofline(*ex, {0.004, 0.001}, roof, "unfused");
  EXPECT_EQ(r.total_flops, 32768 + 256);
  EXPECT_EQ(r.kernel_flops, 32768 + 256);
  EXPECT_EQ(r.total_dram_bytes, 11264 + 2048);
  EXPECT_DOUBLE_EQ(r.kernel_ms, 0.005);
  ASSERT_EQ(r.kernels.size(), 2u);
  EXPECT_NE(r.kernels[0].name.find("matmul"), std::string::npos);  // longest first
  EXPECT_EQ(r.kernels[0].kind, "contraction");
  EXPECT_FALSE(r.kernels[0].memory_bound);
  EXPECT_NEAR(r.kernels[0].percent_of_roof, 81.92, 1e-9);  // 32768 / 4e3 ns = 8.192 GFLOP/s of 10
  EXPECT_TRUE(r.kernels[1].memory_bound);
  EXPECT_NEAR(r.kernels[1].percent_of_roof, 20.48, 1e-9);  // 2048 B / 1e3 ns = 2.048 GB/s of 10
  EXPECT_NEAR(r.compute_time_share, 0.8, 1e-12);
  EXPECT_NEAR(r.memory_time_share, 0.2, 1e-12);
  EXPECT_NEAR(r.compute_percent_of_roof, 81.92, 1e-9);
  EXPECT_NEAR(r.memory_percent_of_roof, 20.48, 1e-9);
  EXPECT_THROW(analysis::roofline(*ex, {0.004}, roof, "x"), InternalError);  // one time per group
}

TEST(Roofline, FusionRemovesTheIntermediateBytes) {
  auto ex = tiny(/*fused=*/true);
  analysis::Roof roof{10, 10, 1};
  std::vector<double> ms(ex->plan().groups.size(), 0.004);
  auto r = analysis::roofline(*ex, ms, roof, "fused");
  ASSERT_EQ(r.kernels.size(), 1u);
  EXPECT_EQ(r.kernels[0].flops, 32768 + 256);
  EXPECT_EQ(r.kernels[0].dram_bytes, 11264);  // the MatMul's output never reaches memory
}

TEST(Roofline, JsonAndSvg) {
  auto fx = tiny(true), ux = tiny(false);
  analysis::Roof roof{10, 10, 1};
  std::vector<double> fms(fx->plan().groups.size(), 0.004);
  auto f = analysis::roofline(*fx, fms, roof, "fused");
  auto u = analysis::roofline(*ux, {0.004, 0.001}, roof, "unfused");
  analysis::MachineModel m;
  m.cpu_model = "Test \"CPU\"";
  std::string j = analysis::roofline_json(f, &u, m);
  for (const char* key : {"{\"machine\": {\"peak_gflops\": 10, \"dram_gbps\": 10, \"threads\": 1",
                          "\"total_flops\": 33024", "\"kernels\": [{\"name\": \"", "\"flops\": 33024",
                          "\"dram_bytes\": 11264", "\"time_ms\": 0.004", "\"gflops\": 8.256", "\"intensity\":",
                          "\"bound\": \"compute\"", "\"bound\": \"memory\"", "\"percent_of_roof\": 82.56",
                          "\"unfused\": {\"total_flops\": 33024", "\"cpu\": \"Test \\\"CPU\\\"\""})
    EXPECT_NE(j.find(key), std::string::npos) << key << " not in " << j;
  EXPECT_EQ(analysis::roofline_json(f, nullptr, m).find("unfused"), std::string::npos);

  std::string svg = analysis::roofline_svg(f, &u);
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  size_t dots = 0;
  for (size_t p = svg.find("class=\"kernel\""); p != std::string::npos; p = svg.find("class=\"kernel\"", p + 1)) ++dots;
  EXPECT_EQ(dots, 3u);  // one per kernel, fused and unfused
  for (const char* id : {"id=\"compute-roof\"", "id=\"bandwidth-roof\"", "id=\"legend\"", "id=\"xlabel\"",
                         "GFLOP/s", "FLOP per byte", "id=\"fused\"", "id=\"unfused\""})
    EXPECT_NE(svg.find(id), std::string::npos) << id;
  std::string html = analysis::roofline_html("tiny<1>.onnx", f, &u, m);
  EXPECT_NE(html.find("tiny&lt;1&gt;.onnx"), std::string::npos);
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("</table>"), std::string::npos);
}

}  // namespace
}  // namespace kiln
