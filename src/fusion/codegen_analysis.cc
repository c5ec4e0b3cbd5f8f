#include "fusion/codegen_analysis.h"

namespace kiln {

const loop::KernelAnalysis& CodegenAnalysis::analyze(const FusionGroup& grp, const Members& m) {
  ++calls_;
  Key key{m, grp.outputs};
  if (auto it = cache_.find(key); it != cache_.end()) {
    ++hits_;
    return it->second;
  }
  const auto t0 = std::chrono::steady_clock::now();
  loop::KernelAnalysis a = loop::analyze_group(grp, sched_);
  ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return cache_.emplace(std::move(key), std::move(a)).first->second;
}

}  // namespace kiln
