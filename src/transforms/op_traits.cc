#include "transforms/op_traits.h"

#include <optional>
#include <set>
#include <string>

namespace kiln {

bool is_identity_dropout(const Node& n) {
  if (n.op_type() != "Dropout" || !n.domain().empty()) return false;
  auto constant_scalar = [](const Value* v) -> std::optional<double> {
    if (!v || !v->is_constant() || v->constant().numel() != 1) return std::nullopt;
    return v->constant().as_double(0);
  };
  const Value* training = n.input(2);
  if (!training) return true;
  const auto t = constant_scalar(training);
  if (!t) return false;
  if (*t == 0.0) return true;
  // Training mode with a ratio of 0 keeps every element and scales by 1 / (1 - 0): the identity
  // too (torchvision's Swin exports its attention dropout so, training_mode true and p = 0, and
  // as a view in the middle of the attention it kept QK^T-softmax and P-V apart).
  const auto r = constant_scalar(n.input(1));
  return r && *r == 0.0;
}

bool is_nondeterministic(const Node& n) {
  static const std::set<std::string> kRandom = {"RandomNormal",     "RandomUniform", "RandomNormalLike",
                                                "RandomUniformLike", "Multinomial",   "Bernoulli"};
  if (!n.domain().empty()) return true;  // unknown semantics: assume the worst
  if (kRandom.count(n.op_type())) return true;
  return n.op_type() == "Dropout" && !is_identity_dropout(n);
}

}  // namespace kiln
