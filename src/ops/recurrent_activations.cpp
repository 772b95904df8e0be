#include "ops/recurrent_activations.hpp"

#include <algorithm>
#include <cctype>

namespace kiln::ops {

// Default (alpha, beta) of each activation, and whether it reads them from the attribute lists.
static bool activation_defaults(const std::string& n, double& a, double& b, int& uses) {
  uses = 0;
  a = b = 0;
  if (n == "sigmoid" || n == "tanh" || n == "relu" || n == "softsign" || n == "softplus") {
    return true;
  }
  if (n == "leakyrelu")
    a = 0.01, uses = 1;
  else if (n == "thresholdedrelu")
    a = 1.0, uses = 1;
  else if (n == "elu")
    a = 1.0, uses = 1;
  else if (n == "affine")
    a = 1.0, b = 0.0, uses = 2;
  else if (n == "scaledtanh")
    a = 1.0, b = 1.0, uses = 2;
  else if (n == "hardsigmoid")
    a = 0.2, b = 0.5, uses = 2;
  else
    return false;
  return true;
}

std::vector<RecurrentActivation> read_recurrent_activations(
    const AttrReader& ctx, const std::vector<std::string>& defaults, int dirs) {
  std::vector<std::string> names;
  if (ctx.has_attr("activations")) {
    names = ctx.attr_strings("activations");
    if (names.size() == defaults.size() && dirs == 2) {  // one list shared by both directions
      std::vector<std::string> twice = names;
      twice.insert(twice.end(), names.begin(), names.end());
      names = twice;
    }
    ctx.check(names.size() == defaults.size() * static_cast<size_t>(dirs),
              "{} activations given, expected {}", names.size(),
              defaults.size() * static_cast<size_t>(dirs));
  } else {
    for (int d = 0; d < dirs; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
  }
  std::vector<float> alphas = ctx.attr_floats("activation_alpha", {});
  std::vector<float> betas = ctx.attr_floats("activation_beta", {});
  size_t ai = 0, bi = 0;
  std::vector<RecurrentActivation> out;
  for (std::string n : names) {
    std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
    RecurrentActivation a{n};
    int uses = 0;
    if (!activation_defaults(n, a.alpha, a.beta, uses)) ctx.unsupported("activation '{}'", n);
    if (uses >= 1 && ai < alphas.size()) a.alpha = alphas[ai++];
    if (uses >= 2 && bi < betas.size()) a.beta = betas[bi++];
    out.push_back(a);
  }
  return out;
}

}  // namespace kiln::ops
