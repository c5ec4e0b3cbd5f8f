#include "reference/op_registry.h"

#include <algorithm>

namespace kiln {

const OpRegistry& OpRegistry::global() {
  static const OpRegistry reg = [] {
    OpRegistry r;
    register_elementwise_ops(r);
    register_nn_ops(r);
    register_reduction_ops(r);
    register_tensor_ops(r);
    return r;
  }();
  return reg;
}

void OpRegistry::add(OpInfo info) {
  KILN_CHECK(find(info.name) == nullptr, "op ", info.name, " registered twice");
  ops_.push_back(std::move(info));
}

const OpInfo* OpRegistry::find(const std::string& op_type) const {
  for (const auto& o : ops_)
    if (o.name == op_type) return &o;
  return nullptr;
}

std::vector<std::string> OpRegistry::names() const {
  std::vector<std::string> r;
  for (const auto& o : ops_) r.push_back(o.name);
  std::sort(r.begin(), r.end());
  return r;
}

}  // namespace kiln
