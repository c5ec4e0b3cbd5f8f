#include "transforms/decompose_grid_sample.h"

#include <array>
#include <string>
#include <vector>

#include "transforms/node_rewriter.h"

namespace kiln {

namespace {

// The rewrite of one GridSample (decompose_grid_sample.h), op by op as the reference kernel
// computes it.
class GridSampleSpelling {
 public:
  GridSampleSpelling(Graph& g, Node* n) : rw_(g, n) {
    x_ = rw_.input(0);
    grid_ = rw_.input(1);
    const Shape& xs = x_->shape();
    n_ = xs[0];
    c_ = xs[1];
    h_ = xs[2];
    w_ = xs[3];
    p_ = grid_->shape()[1] * grid_->shape()[2];
    align_ = rw_.attrs().count("align_corners") && std::get<int64_t>(rw_.attrs().at("align_corners")) != 0;
    mode_ = attr("mode", "bilinear");
    padding_ = attr("padding_mode", "zeros");
  }

  void emit() {
    // Xf: each plane a row of H · W; the grid's x and y as [N, 1, P].
    xf_ = rw_.reshape(x_, {n_, c_, h_ * w_}, "planes");
    Value* gx = grid_coordinate(0);
    Value* gy = grid_coordinate(1);
    Value* ix = unnormalize(gx, w_);
    Value* iy = unnormalize(gy, h_);
    Value* sum = nullptr;
    if (mode_ == "bicubic") {
      sum = bicubic(ix, iy);
    } else {
      ix = pad(ix, w_);
      iy = pad(iy, h_);
      if (mode_ == "nearest") {
        Value* rx = unary("Round", ix);
        Value* ry = unary("Round", iy);
        sum = tap(rx, ry);
      } else {
        Value* x0 = unary("Floor", ix);
        Value* y0 = unary("Floor", iy);
        Value* x1 = add(x0, 1);
        Value* y1 = add(y0, 1);
        Value* wx0 = bin("Sub", x1, ix);
        Value* wx1 = bin("Sub", ix, x0);
        Value* wy0 = bin("Sub", y1, iy);
        Value* wy1 = bin("Sub", iy, y0);
        // (x0, y0), (x1, y0), (x0, y1), (x1, y1), each value times its weight, summed in order.
        const std::vector<std::array<Value*, 4>> corners = {
            {x0, y0, wx0, wy0}, {x1, y0, wx1, wy0}, {x0, y1, wx0, wy1}, {x1, y1, wx1, wy1}};
        for (const auto& [cx, cy, wx, wy] : corners) {
          Value* v = tap(cx, cy);
          Value* weight = bin("Mul", wx, wy);
          Value* term = bin("Mul", v, weight);
          sum = sum ? bin("Add", sum, term) : term;
        }
      }
    }
    Value* y = rw_.output(0);
    rw_.emit("Reshape", {sum, rw_.ints("out_shape", y->shape())}, y->type(), "sampled", {}, y);
  }

 private:
  std::string attr(const std::string& name, const std::string& dflt) const {
    auto it = rw_.attrs().find(name);
    return it == rw_.attrs().end() ? dflt : std::get<std::string>(it->second);
  }
  // Every helper takes its operands as values made before it is called, and draws its names in
  // a fixed order, so the rewrite (and its golden test) does not depend on the order in which a
  // compiler evaluates function arguments.
  std::string next() { return "gs" + std::to_string(count_++); }
  Value* f(double v) { return rw_.scalar(next(), v, DType::Float32); }
  Value* unary(const std::string& op, Value* a) { return rw_.unary(op, a, next()); }
  Value* bin(const std::string& op, Value* a, Value* b) { return rw_.binary(op, a, b, next()); }
  Value* add(Value* a, double v) {
    Value* c = f(v);
    return bin("Add", a, c);
  }
  Value* mul(Value* a, double v) {
    Value* c = f(v);
    return bin("Mul", a, c);
  }
  Value* emit(const std::string& op, const std::vector<Value*>& ins, const TensorType& t, AttributeMap attrs = {}) {
    return rw_.emit(op, ins, t, next(), std::move(attrs));
  }
  Value* test(const std::string& op, Value* a, double v) {
    Value* c = f(v);
    return emit(op, {a, c}, {DType::Bool, a->shape()});
  }
  Value* clip(Value* a, double lo, double hi) {
    Value* l = f(lo);
    Value* h = f(hi);
    return emit("Clip", {a, l, h}, a->type());
  }
  Value* where(Value* c, Value* a, Value* b) { return emit("Where", {c, a, b}, {DType::Float32, a->shape()}); }

  // Component k of the grid, [N, 1, P].
  Value* grid_coordinate(int64_t k) {
    const Shape& gs = grid_->shape();
    const std::string t = k == 0 ? "grid_x" : "grid_y";
    Value* s = rw_.emit("Slice", {grid_, rw_.ints(t + "_start", {k}), rw_.ints(t + "_end", {k + 1}), rw_.ints(t + "_axis", {3})},
                        {DType::Float32, {gs[0], gs[1], gs[2], 1}}, t);
    return rw_.reshape(s, {n_, 1, p_}, t + "_row");
  }

  // The pixel coordinate: ((g + 1) · 0.5) · (size − 1), or ((g + 1) · size − 1) · 0.5.
  Value* unnormalize(Value* g, int64_t size) {
    Value* t = add(g, 1);
    if (align_) return mul(mul(t, 0.5), double(size - 1));
    return mul(add(mul(t, double(size)), -1), 0.5);
  }

  // in reflected into [twice_low / 2, twice_high / 2].
  Value* reflect(Value* in, double twice_low, double twice_high) {
    if (twice_low == twice_high) return mul(in, 0);  // reflects to 0 (as 0 · in: in is finite)
    const double lo = twice_low * 0.5, span = (twice_high - twice_low) * 0.5;
    Value* a = unary("Abs", add(in, -lo));
    Value* sp = f(span);
    Value* extra = emit("Mod", {a, sp}, a->type(), {{"fmod", int64_t{1}}});
    Value* flips = unary("Floor", bin("Div", a, sp));
    Value* two = f(2);
    Value* parity = emit("Mod", {flips, two}, flips->type(), {{"fmod", int64_t{1}}});
    Value* even = test("Equal", parity, 0);
    Value* kept = add(extra, lo);
    Value* flipped = add(bin("Sub", sp, extra), lo);
    return where(even, kept, flipped);
  }

  // The padding mode applied to a coordinate along an axis of `size`.
  Value* pad(Value* x, int64_t size) {
    const double hi = double(size - 1);
    if (padding_ == "border") return clip(x, 0, hi);
    if (padding_ == "reflection") {
      Value* r = align_ ? reflect(x, 0, 2 * hi) : reflect(x, -1, 2 * double(size) - 1);
      return clip(r, 0, hi);
    }
    return x;
  }

  // X at integer-valued coordinates (x, y) of each plane, 0 outside: [N, C, P].
  Value* tap(Value* x, Value* y) {
    Value* inside = nullptr;
    if (padding_ == "zeros" || mode_ == "bicubic") {
      Value* x_lo = test("GreaterOrEqual", x, 0);
      Value* x_hi = test("LessOrEqual", x, double(w_ - 1));
      Value* in_x = emit("And", {x_lo, x_hi}, {DType::Bool, x->shape()});
      Value* y_lo = test("GreaterOrEqual", y, 0);
      Value* y_hi = test("LessOrEqual", y, double(h_ - 1));
      Value* in_y = emit("And", {y_lo, y_hi}, {DType::Bool, y->shape()});
      inside = emit("And", {in_x, in_y}, {DType::Bool, x->shape()});
    }
    Value* xc = clip(x, 0, double(w_ - 1));
    Value* xi = rw_.cast(xc, DType::Int64, next());
    Value* yc = clip(y, 0, double(h_ - 1));
    Value* yi = rw_.cast(yc, DType::Int64, next());
    Value* width = rw_.scalar(next(), double(w_), DType::Int64);
    Value* flat = bin("Add", bin("Mul", yi, width), xi);
    Value* shape = rw_.ints(next(), {n_, c_, p_});
    Value* idx = emit("Expand", {flat, shape}, {DType::Int64, {n_, c_, p_}});
    Value* v = emit("GatherElements", {xf_, idx}, {DType::Float32, {n_, c_, p_}}, {{"axis", int64_t{2}}});
    if (!inside) return v;
    Value* zero = f(0);
    return where(inside, v, zero);
  }

  // The four cubic convolution weights at distance t (A = −0.75), each [N, 1, P].
  std::vector<Value*> cubic_weights(Value* t) {
    const double a = -0.75;
    auto outer = [&](Value* x) {  // ((a·x − 5a)·x + 8a)·x − 4a
      return add(bin("Mul", add(bin("Mul", add(mul(x, a), -5 * a), x), 8 * a), x), -4 * a);
    };
    auto inner = [&](Value* x) {  // ((a + 2)·x − (a + 3))·x·x + 1
      return add(bin("Mul", bin("Mul", add(mul(x, a + 2), -(a + 3)), x), x), 1);
    };
    Value* one = f(1);
    Value* two = f(2);
    Value* w0 = outer(add(t, 1));
    Value* w1 = inner(t);
    Value* w2 = inner(bin("Sub", one, t));
    Value* w3 = outer(bin("Sub", two, t));
    return {w0, w1, w2, w3};
  }

  Value* bicubic(Value* ix, Value* iy) {
    Value* x0 = unary("Floor", ix);
    Value* y0 = unary("Floor", iy);
    const std::vector<Value*> wx = cubic_weights(bin("Sub", ix, x0));
    const std::vector<Value*> wy = cubic_weights(bin("Sub", iy, y0));
    std::vector<Value*> xs;
    for (int k = 0; k < 4; ++k) xs.push_back(pad(add(x0, k - 1), w_));
    Value* sum = nullptr;
    for (int r = 0; r < 4; ++r) {
      Value* yy = pad(add(y0, r - 1), h_);
      Value* row = nullptr;
      for (int k = 0; k < 4; ++k) {
        Value* v = tap(xs[size_t(k)], yy);
        Value* term = bin("Mul", v, wx[size_t(k)]);
        row = row ? bin("Add", row, term) : term;
      }
      Value* term = bin("Mul", row, wy[size_t(r)]);
      sum = sum ? bin("Add", sum, term) : term;
    }
    return sum;
  }

  NodeRewriter rw_;
  Value *x_ = nullptr, *grid_ = nullptr, *xf_ = nullptr;
  int64_t n_ = 0, c_ = 0, h_ = 0, w_ = 0, p_ = 0;
  bool align_ = false;
  std::string mode_, padding_;
  int count_ = 0;
};

}  // namespace

std::string DecomposeGridSample::refusal(const Node& n) {
  if (n.op_type() != "GridSample" || !n.domain().empty()) return "not a GridSample";
  if (n.num_inputs() != 2 || !n.input(0) || !n.input(1) || n.num_outputs() != 1) return "expects X, grid and one output";
  const Value* x = n.input(0);
  const Value* grid = n.input(1);
  if (x->dtype() != DType::Float32 || grid->dtype() != DType::Float32) return "X and grid must be float32";
  const Shape& xs = x->shape();
  const Shape& gs = grid->shape();
  if (xs.size() != 4 || gs.size() != 4 || gs[3] != 2 || gs[0] != xs[0]) return "X must be [N, C, H, W] and grid [N, Ho, Wo, 2]";
  if (n.output(0)->type() != TensorType{DType::Float32, {xs[0], xs[1], gs[1], gs[2]}}) return "Y's type does not match";
  if (shape_numel(xs) == 0 || shape_numel(n.output(0)->shape()) == 0) return "an empty input or output";
  const std::string mode = n.attr_string("mode", "bilinear"), padding = n.attr_string("padding_mode", "zeros");
  if (mode != "bilinear" && mode != "nearest" && mode != "bicubic") return "unsupported mode '" + mode + "'";
  if (padding != "zeros" && padding != "border" && padding != "reflection")
    return "unsupported padding_mode '" + padding + "'";
  return "";
}

bool DecomposeGridSample::run(Graph& g) {
  bool changed = rewrite_in_order(
      g, [](const Node& n) { return refusal(n).empty(); }, [&](Node* n) { GridSampleSpelling(g, n).emit(); });
  if (changed) g.remove_unused_values();
  return changed;
}

}  // namespace kiln
