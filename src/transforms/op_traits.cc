#include "transforms/op_traits.h"

#include <set>
#include <string>

namespace kiln {

bool is_inference_dropout(const Node& n) {
  if (n.op_type() != "Dropout" || !n.domain().empty()) return false;
  const Value* training = n.input(2);
  if (!training) return true;
  return training->is_constant() && training->constant().numel() == 1 && training->constant().as_double(0) == 0.0;
}

bool is_nondeterministic(const Node& n) {
  static const std::set<std::string> kRandom = {"RandomNormal",     "RandomUniform", "RandomNormalLike",
                                                "RandomUniformLike", "Multinomial",   "Bernoulli"};
  if (!n.domain().empty()) return true;  // unknown semantics: assume the worst
  if (kRandom.count(n.op_type())) return true;
  return n.op_type() == "Dropout" && !is_inference_dropout(n);
}

}  // namespace kiln
