// trim_conv_taps: every conv geometry the pass rewrites computes what it did (reference executor
// before and after), the output shape kept, and the geometries it must leave alone.
#include "lowering_test_util.h"
#include "transforms/trim_conv_taps.h"

namespace kiln {
namespace {

using testing::check_pass_equivalence;
using testing::EquivalenceOptions;
using testing::RandomConst;
using testing::with_constants;

int64_t conv_out(int64_t in, int64_t k, int64_t s, int64_t d, int64_t b, int64_t e) {
  return (in + b + e - d * (k - 1) - 1) / s + 1;
}

// Random 1-D and 2-D convs with large dilations and pads (DeepLab's ASPP on small maps, and more):
// whenever the pass changes one, the result is the reference's.
TEST(TrimConvTaps, RandomGeometriesKeepTheFunction) {
  std::mt19937 rng(11);
  int rewritten = 0, tried = 0;
  for (int i = 0; i < 300 && rewritten < 60; ++i) {
    const int nd = 1 + int(rng() % 2);
    const int64_t c = 1 + rng() % 3, m = 1 + rng() % 3, group = (c == m && rng() % 3 == 0) ? c : 1;
    Shape xs = {1, c}, ws = {m, c / group}, ys = {1, m};
    std::vector<int64_t> s, d, pb, pe;
    bool ok = true;
    for (int a = 0; a < nd; ++a) {
      const int64_t in = 1 + rng() % 9, k = 1 + rng() % 4;
      s.push_back(1 + rng() % 3);
      d.push_back(1 + rng() % 8);
      pb.push_back(rng() % 12);
      pe.push_back(rng() % 12);
      xs.push_back(in);
      ws.push_back(k);
      const int64_t span = in + pb.back() + pe.back() - d.back() * (k - 1) - 1;
      if (span < 0) ok = false;
      ys.push_back(ok ? conv_out(in, k, s.back(), d.back(), pb.back(), pe.back()) : 1);
    }
    if (!ok) continue;
    std::vector<int64_t> pads = pb;
    pads.insert(pads.end(), pe.begin(), pe.end());
    auto list = [](const std::vector<int64_t>& v) {
      std::string r = "[";
      for (size_t k = 0; k < v.size(); ++k) r += (k ? ", " : "") + std::to_string(v[k]);
      return r + "]";
    };
    const bool bias = rng() % 2;
    std::vector<RandomConst> consts = {{"w", DType::Float32, ws}};
    if (bias) consts.push_back({"b", DType::Float32, {m}});
    const std::string text = with_constants(
        "graph main opset 17 (%x: f32" + shape_str(xs) + ") -> (%y) {\n  %y: f32" + shape_str(ys) + " = Conv(%x, %w" +
            (bias ? ", %b" : "") + ") {strides=" + list(s) + ", dilations=" + list(d) + ", pads=" + list(pads) +
            ", group=" + std::to_string(group) + "}\n}\n",
        consts, rng);
    auto g = parse_graph(text);
    ++tried;
    const bool rewrites = TrimConvTaps::refusal(*g->nodes().front()).empty();
    if (!rewrites && TrimConvTaps::refusal(*g->nodes().front()).find("reads only padding") != std::string::npos) continue;
    EquivalenceOptions o;
    o.expect_change = rewrites;
    SCOPED_TRACE(text);
    auto after = check_pass_equivalence(text, "trim_conv_taps", o);
    rewritten += rewrites;
    if (rewrites) {
      const Node* conv = after->nodes().back();
      ASSERT_EQ(conv->op_type(), "Conv");
      EXPECT_LT(shape_numel(conv->input(1)->shape()), shape_numel(ws)) << "fewer taps";
      for (int64_t p : conv->attr_ints("pads")) EXPECT_GE(p, 0);
    }
  }
  EXPECT_GE(rewritten, 20) << "of " << tried;
}

TEST(TrimConvTaps, Refusals) {
  auto g = parse_graph(R"(graph main opset 17 (%x: f32[1,1,8,8], %w: f32[1,1,3,3]) -> (%y, %z, %v) {
  %wc = constant f32[1,1,3,3] [1, 2, 3, 4, 5, 6, 7, 8, 9]
  %y: f32[1,1,8,8] = Conv(%x, %w) {dilations=[6, 6], pads=[6, 6, 6, 6]} name="computed"
  %z: f32[1,1,8,8] = Conv(%x, %wc) {auto_pad="SAME_UPPER", dilations=[6, 6]} name="same"
  %v: f32[1,1,8,8] = Conv(%x, %wc) {pads=[1, 1, 1, 1]} name="dense"
}
)");
  std::vector<std::string> why;
  for (const Node* n : g->nodes()) why.push_back(TrimConvTaps::refusal(*n));
  EXPECT_EQ(why, (std::vector<std::string>{"the weights are computed", "auto_pad SAME_UPPER decides the padding",
                                           "every tap reads the input somewhere"}));
}

}  // namespace
}  // namespace kiln
