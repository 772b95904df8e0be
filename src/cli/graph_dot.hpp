#pragma once
// The main graph as Graphviz DOT (`kiln inspect --dot`): inputs and outputs as ellipses, nodes as
// boxes (op type, name, weight shapes), edges labelled with the value's type.
#include <string>

#include "ir/graph.hpp"

namespace kiln::cli {

std::string graph_to_dot(const ir::Graph& graph);

}  // namespace kiln::cli
