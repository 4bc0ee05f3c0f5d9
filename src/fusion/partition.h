// Cuts a Graph into fusion groups: runs of pointwise and in-place ops over one iteration domain
// (the shape of their outputs) that one kernel can compute, with the reductions along the last
// dimension among them (sum, mean, softmax, log_softmax and their backward: row kernels), or the
// sums over the first of two dimensions that end them (a bias's gradient: column kernels). A
// stack or cat of values of the domain's shape joins a group of pointwise ops, whose kernel
// stores each value into its place in the result.
// Everything else (matmuls, convolutions, other reductions, RNG, views, unknown ops) stays eager
// and bounds the groups.
//
// A group is legal only if, between its first and last member, no other op reads a value the
// group produces or mutates anything, and a group that writes a tensor from outside itself (an
// optimizer's in-place update) has no other op between its members at all: the group runs at its
// last member, so those ops would otherwise see values the group has not written yet.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace hotpath::detail {

// What kind of kernel a group becomes (codegen/kernel.h).
enum class GroupKind {
  Pointwise,  // element by element over the domain
  Rows,       // it reduces along the last dimension: a row kernel
  Columns,    // it sums 2-D values over their first dimension: a column kernel
  Total,      // mse_loss reduced to one value, alone: a total kernel
};

struct FusionGroup {
  std::vector<int> nodes;  // ascending node indices
  TensorMeta domain;       // the shape the members iterate over (a row op's operand), device
  GroupKind kind = GroupKind::Pointwise;
  std::string name;  // what it fuses, e.g. "mul_add_addcmul_sqrt_div_addcdiv"
  bool rows() const { return kind == GroupKind::Rows; }
  bool columns() const { return kind == GroupKind::Columns; }
  bool total() const { return kind == GroupKind::Total; }
};

struct Partition {
  std::vector<FusionGroup> groups;
  std::vector<int> group_of;           // per node: its group, or -1 (eager)
  std::vector<std::string> eager_why;  // per node not in a group: why (empty for grouped nodes)

  std::string to_text(const Graph& g) const;  // stable, for golden tests and logs
};

Partition partition_graph(const Graph& g);

// Why `n` cannot be in any group, or "" if it can.
std::string unfusable_reason(const Graph& g, const Node& n);

}  // namespace hotpath::detail
