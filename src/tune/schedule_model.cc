#include "tune/schedule_model.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "support/error.h"

namespace kiln::tune {

namespace {

double lg(double v) { return std::log2(std::max(v, 1e-9)); }
// Thresholds that may be "never" (2^40): capped, so that never is a little beyond the largest real
// value rather than a lever arm that dominates the fit.
double lg_capped(int64_t v) { return std::min(lg(double(v) + 1), 24.0); }

// The nest facts the features use: the first (outermost) parallel loop's extent (0: none, -1: not
// a constant), how many loops and micro-kernel calls there are.
struct NestFacts {
  int64_t parallel_extent = 0;
  int loops = 0, calls = 0;
};

void walk(const loop::Stmt& s, NestFacts& f) {
  if (!s) return;
  if (s->kind == loop::StmtKind::For) {
    ++f.loops;
    if (s->for_kind == loop::ForKind::Parallel && f.parallel_extent == 0)
      f.parallel_extent = s->extent && s->extent->kind == loop::ExprKind::IntImm ? s->extent->int_value : -1;
  }
  if (s->kind == loop::StmtKind::Call) ++f.calls;
  for (const auto& b : s->body) walk(b, f);
  for (const auto& b : s->else_body) walk(b, f);
}

// The raw features whose squared difference from the default's is a feature too.
constexpr int kSquared[] = {0, 1, 3, 6, 7, 8, 18};

const std::vector<std::string>& raw_feature_names() {
  static const std::vector<std::string> names = {
      "lg mr", "lg nr/vw", "register use", "lg kc", "kc*nr panel over L1", "mr*kc panel over L1",
      "lg a_reuse/L2", "lg rows_block/L2", "lg stencil/L2", "lg stencil_max_group_width",
      "lg channel_rows_positions", "lg channel_rows_positions_few_k", "lg channel_rows_few_k",
      "lg chain.max_row_blocks", "lg chain.min_tiles", "lg chain.max_pack/L2", "lg chain.max_local/L2",
      "lg chain.max_stream/L2", "lg unroll",
      // the nest
      "parallel", "lg parallel extent", "split imbalance", "serial x lg flops", "lg loops", "lg micro-kernel calls"};
  return names;
}

}  // namespace

const std::vector<std::string>& feature_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const std::string& r : raw_feature_names()) n.push_back("d " + r);
    for (int i : kSquared) n.push_back("(d " + raw_feature_names()[size_t(i)] + ")^2");
    return n;
  }();
  return names;
}

std::vector<double> relative_features(const std::vector<double>& raw, const std::vector<double>& raw_default) {
  KILN_CHECK(raw.size() == raw_feature_names().size() && raw_default.size() == raw.size(),
             "relative_features: ", raw.size(), " and ", raw_default.size(), " values");
  std::vector<double> x(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) x[i] = raw[i] - raw_default[i];
  for (int i : kSquared) x.push_back(x[size_t(i)] * x[size_t(i)]);
  return x;
}

std::vector<double> schedule_features(const KernelTraits& k, const loop::Schedule& s, const loop::LoopKernel* lowered,
                                      const Target& t, int threads) {
  const double vw = std::max(1, s.vector_width);
  const double l1 = double(std::max<int64_t>(t.l1_bytes, 1024)), l2 = double(std::max<int64_t>(t.l2_bytes, 1024));
  const auto& c = s.contraction;
  const double mr = c.mr, nrv = c.nr / vw;
  std::vector<double> f = {
      lg(mr), lg(nrv), (mr * nrv + t.contraction_operand_registers) / std::max(1, t.vector_registers), lg(double(c.kc)),
      // a packed kc × nr B panel and an mr × kc A strip are re-read from L1 by every micro-kernel
      // call: past L1 (the hinge) they come from L2
      std::max(0.0, lg(double(c.kc) * c.nr * 4 / l1)), std::max(0.0, lg(double(c.kc) * mr * 4 / l1)),
      lg(double(c.a_reuse_bytes) / l2), lg(double(s.rows_block_bytes) / l2), lg(double(s.stencil_bytes) / l2),
      lg_capped(s.stencil_max_group_width), lg_capped(c.channel_rows_positions),
      lg_capped(c.channel_rows_positions_few_k), lg(double(c.channel_rows_few_k)), lg(double(s.chain.max_row_blocks)),
      lg(double(s.chain.min_tiles)), lg(double(s.chain.max_pack_bytes) / l2), lg(double(s.chain.max_local_bytes) / l2),
      lg(double(s.chain.max_stream_bytes) / l2), lg(s.unroll)};
  NestFacts n;
  if (lowered) walk(lowered->body, n);
  const double T = std::max(1, threads);
  const bool parallel = n.parallel_extent != 0;
  const double e = double(std::max<int64_t>(n.parallel_extent, 0));
  f.push_back(parallel ? 1 : 0);
  f.push_back(e > 0 ? lg(e) : 0);
  f.push_back(e > 0 ? std::ceil(e / T) * T / e - 1 : 0);
  f.push_back(lowered && !parallel && T > 1 ? lg(k.flops + 1) : 0);
  f.push_back(lg(n.loops + 1));
  f.push_back(lg(n.calls + 1));
  KILN_CHECK(f.size() == raw_feature_names().size(), "schedule_features: ", f.size(), " values for ",
             raw_feature_names().size(), " names");
  return f;
}

void ScheduleModel::add(std::vector<double> x, double y, int kernel) {
  KILN_CHECK(x.size() == feature_names().size(), "ScheduleModel::add: ", x.size(), " features");
  if (!std::isfinite(y)) return;
  samples_.push_back({std::move(x), y, kernel});
  fitted_ = false;
}

namespace {

// The lower Cholesky factor of the m × m matrix `a` (row-major, lower triangle read), in place;
// false when `a` is not positive definite.
bool cholesky(std::vector<double>& a, size_t m) {
  for (size_t p = 0; p < m; ++p)
    for (size_t q = 0; q <= p; ++q) {
      double v = a[p * m + q];
      for (size_t r = 0; r < q; ++r) v -= a[p * m + r] * a[q * m + r];
      if (p == q) {
        if (!(v > 0)) return false;
        a[p * m + p] = std::sqrt(v);
      } else {
        a[p * m + q] = v / a[q * m + q];
      }
    }
  return true;
}

// L u = b, in place.
void forward(const std::vector<double>& l, size_t m, std::vector<double>& b) {
  for (size_t p = 0; p < m; ++p) {
    for (size_t r = 0; r < p; ++r) b[p] -= l[p * m + r] * b[r];
    b[p] /= l[p * m + p];
  }
}

// Lᵀ z = u, in place.
void backward(const std::vector<double>& l, size_t m, std::vector<double>& b) {
  for (size_t p = m; p-- > 0;) {
    for (size_t r = p + 1; r < m; ++r) b[p] -= l[r * m + p] * b[r];
    b[p] /= l[p * m + p];
  }
}

}  // namespace

bool ScheduleModel::fit(int kernel, double others_weight) {
  fitted_ = false;
  const size_t n = samples_.size();
  if (n < kMinSamples) return false;
  const size_t d = feature_names().size();
  std::vector<double> w(n);
  double wsum = 0;
  for (size_t i = 0; i < n; ++i) wsum += w[i] = samples_[i].kernel == kernel ? 1.0 : others_weight;
  // Column scales: weighted RMS, so one ridge penalty suits features of any unit. A column that is
  // zero on every sample (a field no sample moved) is left out.
  std::vector<double> scale(d, 0);
  for (size_t j = 0; j < d; ++j) {
    double ss = 0;
    for (size_t i = 0; i < n; ++i) ss += w[i] * samples_[i].x[j] * samples_[i].x[j];
    scale[j] = std::sqrt(ss / wsum);
  }
  std::vector<size_t> live;
  for (size_t j = 0; j < d; ++j)
    if (scale[j] > 1e-12) live.push_back(j);
  const size_t m = live.size();
  if (m == 0) return false;
  std::vector<std::vector<double>> z(n, std::vector<double>(m));
  for (size_t i = 0; i < n; ++i)
    for (size_t p = 0; p < m; ++p) z[i][p] = samples_[i].x[live[p]] / scale[live[p]];
  // Normal equations Zᵀ W Z b = Zᵀ W y, Z = X / scale.
  std::vector<double> gram(m * m, 0), zy(m, 0);
  for (size_t i = 0; i < n; ++i)
    for (size_t p = 0; p < m; ++p) {
      zy[p] += w[i] * z[i][p] * samples_[i].y;
      for (size_t q = 0; q <= p; ++q) gram[p * m + q] += w[i] * z[i][p] * z[i][q];
    }
  // The ridge penalty λ (as a share of the weight) is chosen per fit by leave-one-out error, which
  // ridge regression gives in closed form: the residual e_i of sample i left out is
  // e_i / (1 − h_i), h_i = w_i z_iᵀ (Zᵀ W Z + λ I)⁻¹ z_i. Few samples and many features want a
  // large λ; many samples a small one, and a function the features represent is then fitted closely.
  double best_err = INFINITY;
  std::vector<double> best;
  for (double share : {1e-4, 1e-3, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0}) {
    std::vector<double> l = gram;
    for (size_t p = 0; p < m; ++p) l[p * m + p] += share * wsum;
    if (!cholesky(l, m)) continue;
    std::vector<double> b = zy;
    forward(l, m, b);
    backward(l, m, b);
    double err = 0;
    for (size_t i = 0; i < n; ++i) {
      double pred = 0;
      for (size_t p = 0; p < m; ++p) pred += z[i][p] * b[p];
      std::vector<double> u = z[i];
      forward(l, m, u);
      double h = 0;
      for (double v : u) h += v * v;
      h *= w[i];
      const double e = (samples_[i].y - pred) / std::max(1 - h, 1e-6);
      err += w[i] * e * e;
    }
    if (err < best_err) {
      best_err = err;
      best = std::move(b);
      lambda_share_ = share;
    }
  }
  if (best.empty()) return false;
  beta_.assign(d, 0);
  for (size_t p = 0; p < m; ++p) beta_[live[p]] = best[p] / scale[live[p]];
  fitted_ = true;
  return true;
}

double ScheduleModel::predict(const std::vector<double>& x) const {
  if (!fitted_) return 0;
  double y = 0;
  for (size_t j = 0; j < beta_.size() && j < x.size(); ++j) y += beta_[j] * x[j];
  return y;
}

std::vector<size_t> pick_candidates(const std::vector<double>& predicted, size_t keep, size_t explore,
                                    std::mt19937_64& rng) {
  std::vector<size_t> order(predicted.size());
  std::iota(order.begin(), order.end(), size_t(0));
  if (predicted.size() <= keep) return order;
  explore = std::min(explore, keep);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return predicted[a] < predicted[b]; });
  std::vector<size_t> picked(order.begin(), order.begin() + std::ptrdiff_t(keep - explore));
  std::vector<size_t> rest(order.begin() + std::ptrdiff_t(keep - explore), order.end());
  for (size_t e = 0; e < explore; ++e) {
    const size_t i = rng() % rest.size();
    picked.push_back(rest[i]);
    rest.erase(rest.begin() + std::ptrdiff_t(i));
  }
  std::sort(picked.begin(), picked.end());
  return picked;
}

}  // namespace kiln::tune
