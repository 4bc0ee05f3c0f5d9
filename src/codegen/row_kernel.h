// Row kernels: fusion groups that reduce along the last dimension (codegen/kernel.h,
// generate_row_kernel). Internal to codegen/.
//
// The group's domain is [rows, C] (C: the last dimension). Every value is either per element of a
// row ("full": loads, pointwise results, softmax outputs) or per row (sums, means, the maximum and
// normaliser of a softmax, and operands of shape [..., 1]). A reduction whose input needs per-row
// values of level k has level k + 1; the kernel makes one pass over the row per level, computing
// that level's reductions (recomputing the pointwise values they need from the loads, which hit
// the cache), and a last pass that stores the full outputs. Math is fp32, as in ATen's kernels.
//
// The generator works in two steps: define() turns each member into named values (Def) and
// reductions (row_kernel.cpp); emit() lays out the grid and writes the source
// (row_kernel_source.cpp).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "codegen/kernel.h"
#include "fusion/op_table.h"

namespace hotpath::detail {

class RowKernelGenerator {
 public:
  RowKernelGenerator(const Graph& graph, const FusionGroup& fusion_group);
  KernelSpec generate() {
    define();
    emit();
    return std::move(spec);
  }

 private:
  // A named value of the kernel: an fp32 expression over other values.
  struct Def {
    std::string name;
    std::string expr;
    bool load = false;  // read from a tensor, per element
    bool row = false;   // one value per row (else per element)
    int level = 0;      // highest reduction level it depends on
    std::vector<std::string> deps;
  };
  struct Reduction {
    std::string input;   // a full value
    std::string result;  // the per-row value
    bool max = false;    // else a sum
    int level = 1;
  };
  struct ColumnSum {
    std::string input;  // a full value, summed over all rows
    std::size_t param;  // the output: one value per column
  };
  // nll_loss_forward: its per-row loss and count (row values), summed over all rows into its
  // two outputs at the end of the kernel.
  struct Total {
    std::string loss, count;
    std::size_t loss_param = 0, count_param = 0;
    bool mean = false;
  };

  // --- values (row_kernel.cpp)
  void define();
  const std::string& add(Def d);
  std::string reduce(const std::string& input, bool max);
  std::string row_operand(int v);  // a 1-D tensor from outside with one value per row
  std::string operand(int v);      // a value of the group, or a load of a tensor from outside
  // One member: its result as `d` (false: it stores nothing per element or row itself).
  bool define_row_op(const Node& n, const RowOp& r, const std::string& name, Def& d);
  void define_softmax(const RowOp& r, const std::vector<std::string>& t, const std::string& name,
                      Def& d);
  struct Moments {
    std::string mean, centered, squares;  // per row, per element, per row
  };
  Moments moments(const std::string& x, const std::string& name);
  void define_layer_norm(const Node& n, const std::vector<std::string>& t, const std::string& name,
                         Def& d);
  void define_rms_norm(const Node& n, const std::vector<std::string>& t, const std::string& name,
                       Def& d);
  void define_nll_loss(const Node& n, const std::vector<std::string>& t, const std::string& name);
  void define_nll_loss_backward(const Node& n, const std::string& name, Def& d);
  bool define_norm_backward(const Node& n, const RowOp& r, const std::vector<std::string>& t,
                            const std::string& name, Def& d);
  // A per-row output of a norm (its mean or rstd), stored in its own dtype.
  void row_output(int v, const std::string& name, const std::string& from);
  // A pointwise member; returns the value whose tensor receives its result.
  int define_pointwise(const Node& n, std::size_t member, const std::string& name);
  void collect_stores();

  // --- source (row_kernel_source.cpp)
  void emit();
  void layout();
  // The values `targets` need, in definition order: the full ones (a pass over the row), or with
  // `rows` the per-row ones too, none of which may depend on a reduction.
  std::set<std::size_t> closure(const std::vector<std::string>& targets, bool rows = false) const;
  void name_output(std::size_t p);
  void emit_column_blocks();
  void emit_rows();
  void emit_row_values(int level);
  void emit_full_values(const std::set<std::size_t>& need);
  void emit_total();

  const Graph& g;
  const FusionGroup& group;
  const TensorMeta& dom;
  const std::size_t rank;
  const std::int64_t cols;
  const std::vector<std::int64_t> dsizes;
  std::vector<std::int64_t> row_sizes;
  // How operands are indexed: the whole domain, one value per row, one row for every row.
  std::vector<std::int64_t> full_strides, row_strides, col_strides;
  // Rows of up to kWarpCols elements: one warp per row, reductions by shuffles alone (no block
  // barrier per reduction); longer rows: one block per row.
  bool warp_rows = false;
  KernelSpec spec;
  GroupParams params;

  std::vector<Def> defs;
  std::map<std::string, std::size_t> def_of;
  std::vector<Reduction> reds;
  std::map<int, std::string> var;    // value id -> name
  std::map<int, int> final_version;  // tensor -> its last value in the group
  std::vector<ColumnSum> col_sums;
  std::optional<Total> total;
  // The last version of each tensor the group writes: per element or (thread 0) per row.
  std::vector<std::pair<std::size_t, std::string>> full_stores, row_stores;

  // Layout (layout()).
  int warps = 0;
  std::int64_t tiles = 0, chunk_rows = 0, chunks = 0, row_blocks = 0;
  bool column_blocks = false, fixed_grid = false;
  std::string row_grid;
  // The row loop's column loop (and its end): over cached registers, a warp's lanes, or a block.
  bool cached = false;
  std::string columns, close_columns;
  std::set<std::string> emitted_rows;
  std::ostringstream src;
};

}  // namespace hotpath::detail
