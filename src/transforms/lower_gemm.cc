#include "transforms/lower_gemm.h"

#include <cstring>
#include <map>
#include <tuple>

#include "transforms/node_rewriter.h"

namespace kiln {

namespace {

// A 2-D tensor transposed (any dtype: elements are copied as bytes).
Tensor transpose_2d(const Tensor& t) {
  const int64_t rows = t.dim(0), cols = t.dim(1);
  const size_t es = dtype_size(t.dtype());
  Tensor out(t.dtype(), {cols, rows});
  const auto* src = static_cast<const uint8_t*>(t.raw());
  auto* dst = static_cast<uint8_t*>(out.raw());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) std::memcpy(dst + size_t(c * rows + r) * es, src + size_t(r * cols + c) * es, es);
  return out;
}

// Derived constants, one per (source, transposed, scale) for the whole run, so a weight shared by
// several Gemms is transposed once.
class ConstantCache {
 public:
  explicit ConstantCache(Graph& g) : g_(g) {}
  Value* get(Value* src, bool transposed, double scale) {
    auto key = std::make_tuple(src, transposed, scale);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    Tensor t = transposed ? transpose_2d(src->constant()) : src->constant();
    if (scale != 1.0) {
      std::vector<double> v = tensor_to_doubles(t);
      for (double& e : v) e *= scale;
      t = tensor_from_doubles(v, t.shape(), t.dtype());
    }
    std::string suffix = std::string(transposed ? "transposed" : "") + (transposed && scale != 1.0 ? "_" : "") +
                         (scale != 1.0 ? "scaled" : "");
    Value* v = g_.add_constant(g_.unique_name(src->name() + "/" + suffix), std::move(t));
    cache_[key] = v;
    return v;
  }

 private:
  Graph& g_;
  std::map<std::tuple<Value*, bool, double>, Value*> cache_;
};

Value* transposed(NodeRewriter& rw, ConstantCache& cache, Value* v, const std::string& suffix) {
  if (v->is_constant()) return cache.get(v, true, 1.0);
  TensorType t{v->dtype(), {v->shape()[1], v->shape()[0]}};
  return rw.emit("Transpose", {v}, t, suffix, {{"perm", std::vector<int64_t>{1, 0}}});
}

void lower(Graph& g, Node* n, ConstantCache& cache) {
  const bool trans_a = n->attr_int("transA", 0) != 0, trans_b = n->attr_int("transB", 0) != 0;
  const double alpha = n->attr_float("alpha", 1.0f), beta = n->attr_float("beta", 1.0f);
  NodeRewriter rw(g, n);
  Value* a = rw.input(0);
  Value* b = rw.input(1);
  Value* c = beta != 0.0 ? rw.input(2) : nullptr;
  Value* y = rw.output(0);
  const DType dt = a->dtype();
  // Integer Gemms scale by alpha truncated to the integer type; folding in double would differ.
  const bool fold_alpha = alpha != 1.0 && b->is_constant() && is_float(dt);
  const bool mul_alpha = alpha != 1.0 && !fold_alpha;

  if (trans_a) a = transposed(rw, cache, a, "transpose_a");
  if (b->is_constant() && (trans_b || fold_alpha)) b = cache.get(b, trans_b, fold_alpha ? alpha : 1.0);
  else if (trans_b) b = transposed(rw, cache, b, "transpose_b");

  Value* r = rw.emit("MatMul", {a, b}, y->type(), "matmul", {}, mul_alpha || c ? nullptr : y);
  if (mul_alpha) r = rw.binary("Mul", r, rw.scalar("alpha", alpha, dt), "scaled", c ? nullptr : y);
  if (!c) return;
  if (beta != 1.0) {
    if (c->is_constant() && is_float(dt)) c = cache.get(c, false, beta);
    else c = rw.binary("Mul", c, rw.scalar("beta", beta, dt), "scaled_c");
  }
  rw.binary("Add", r, c, "bias", y);
}

}  // namespace

std::string LowerGemm::refusal(const Node& n) {
  if (n.op_type() != "Gemm" || !n.domain().empty()) return "not a Gemm";
  if (!n.input(0) || !n.input(1) || n.num_outputs() != 1) return "expects inputs A and B and one output";
  const Value* a = n.input(0);
  const Value* b = n.input(1);
  if (a->shape().size() != 2 || b->shape().size() != 2) return "A and B are not matrices";
  if (a->dtype() != b->dtype() || a->dtype() != n.output(0)->dtype()) return "A, B and Y differ in dtype";
  const bool ta = n.attr_int("transA", 0) != 0, tb = n.attr_int("transB", 0) != 0;
  const Shape y{a->shape()[ta ? 1 : 0], b->shape()[tb ? 0 : 1]};
  if (a->shape()[ta ? 0 : 1] != b->shape()[tb ? 1 : 0] || n.output(0)->shape() != y)
    return "the shapes of A, B and Y do not match";
  if (const Value* c = n.input(2)) {
    if (c->dtype() != a->dtype() || !broadcasts_to(c->shape(), y)) return "C does not broadcast to Y";
  }
  return "";
}

bool LowerGemm::run(Graph& g) {
  ConstantCache cache(g);
  bool changed = rewrite_in_order(
      g, [](const Node& n) { return refusal(n).empty(); }, [&](Node* n) { lower(g, n, cache); });
  if (changed) g.remove_unused_values();
  return changed;
}

}  // namespace kiln
