#include "fusion/partition.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "fusion/op_table.h"

namespace hotpath::detail {
namespace {

constexpr std::size_t kMaxGroupNodes = 64;

// A reduction along the last dimension (a sum over every dimension but the last is a column sum).
const RowOp* row_op(const Graph& g, const Node& n) {
  return is_column_sum(g, n) ? nullptr : find_row_op(n);
}

// The shape a node iterates over: a pointwise op's output, a row op's or column sum's (full)
// operand.
// A stack's or cat's: its inputs' shape (it stores them).
const TensorMeta& node_domain(const Graph& g, const Node& n) {
  if (is_total_reduction(n) || is_sink(n)) return g.value(n.input_at(0)).meta;
  if (const RowOp* r = find_row_op(n)) return g.value(n.input_at(r->tensors[0])).meta;
  return g.value(n.outputs[0]).meta;
}

bool broadcastable(const TensorMeta& in, const TensorMeta& domain) {
  if (in.sizes.size() > domain.sizes.size()) return false;
  const std::size_t lead = domain.sizes.size() - in.sizes.size();
  for (std::size_t d = 0; d < in.sizes.size(); ++d) {
    if (in.sizes[d] != 1 && in.sizes[d] != domain.sizes[lead + d]) return false;
  }
  return true;
}

bool same_domain(const TensorMeta& a, const TensorMeta& b) {
  return a.sizes == b.sizes && a.device == b.device;
}

// A node over one value per row of `rows` ([..., 1]: the epsilon and rsqrt of a norm).
bool row_shaped(const TensorMeta& node, const TensorMeta& rows) {
  if (node.device != rows.device || node.sizes.size() != rows.sizes.size() || rows.sizes.empty())
    return false;
  for (std::size_t d = 0; d + 1 < rows.sizes.size(); ++d)
    if (node.sizes[d] != rows.sizes[d]) return false;
  return node.sizes.back() == 1 && rows.sizes.back() != 1;
}

// The shape a group iterates over: its reductions' rows, else its first node's domain (a
// group's members share it, but for pointwise ops over one value per row of a row group).
const TensorMeta& group_domain(const Graph& g, const std::vector<int>& members) {
  for (int m : members)
    if (row_op(g, g.node(m)) != nullptr) return node_domain(g, g.node(m));
  return node_domain(g, g.node(members.front()));
}

bool reduces_rows(const Graph& g, const std::vector<int>& members) {
  return std::any_of(members.begin(), members.end(),
                     [&](int m) { return row_op(g, g.node(m)) != nullptr; });
}

// Node `n` may belong to a group over `domain`: over the same shape; or, in a group that reduces
// rows, a pointwise op over one value per row. A reduction of such a value (a sum over its
// dimension of 1) is no reduction of the group's rows: it would sum the value over the row.
// A stack or cat only in a group of pointwise ops (legal() checks the others).
bool fits(const Graph& g, const Node& n, const TensorMeta& domain, bool rows) {
  const TensorMeta& d = node_domain(g, n);
  if (is_sink(n)) return !rows && same_domain(d, domain);
  return same_domain(d, domain) || (rows && find_pointwise(n) != nullptr && row_shaped(d, domain));
}

struct Builder {
  const Graph& g;
  std::vector<std::vector<int>> groups;  // node lists, ascending
  std::vector<int> group_of;

  // Values produced by the nodes of `members`.
  std::set<int> produced(const std::vector<int>& members) const {
    std::set<int> out;
    for (int m : members)
      for (int v : g.node(m).outputs) out.insert(v);
    return out;
  }

  bool writes_outside(const std::vector<int>& members) const {
    const std::set<int> mine(members.begin(), members.end());
    for (int m : members) {
      for (const auto& in : g.node(m).inputs) {
        if (!in.written || in.value < 0) continue;
        const int producer = g.value(in.value).producer;
        if (producer < 0 || !mine.count(producer)) return true;
      }
    }
    return false;
  }

  // A per-row value (a sum or mean) that a member reads as an operand must keep its dimension
  // (shape [..., 1]): row kernels broadcast it along the row, as eager does then.
  bool rows_kept(const std::vector<int>& members) const {
    const std::set<int> mine(members.begin(), members.end());
    for (int m : members) {
      const Node& n = g.node(m);
      const TensorMeta& dom = node_domain(g, n);
      for (const auto& in : n.inputs) {
        if (in.value < 0) continue;
        const Value& v = g.value(in.value);
        if (v.producer < 0 || !mine.count(v.producer)) continue;
        const RowOp* r = row_op(g, g.node(v.producer));
        if (r == nullptr || !r->keeps_row) continue;
        std::vector<std::int64_t> kept(dom.sizes.begin(), dom.sizes.end());
        kept.back() = 1;
        if (std::vector<std::int64_t>(v.meta.sizes.begin(), v.meta.sizes.end()) != kept)
          return false;
      }
    }
    return true;
  }

  // A reduction to one value is a kernel of its own.
  bool total_alone(const std::vector<int>& members) const {
    return members.size() == 1 || std::none_of(members.begin(), members.end(), [&](int m) {
             return is_total_reduction(g.node(m));
           });
  }

  // A column sum's result is complete only when the kernel ends: no member may read it, and a
  // kernel reduces either rows or columns.
  bool columns_apart(const std::vector<int>& members) const {
    std::set<int> sums;
    bool rows = false;
    for (int m : members) {
      if (is_column_sum(g, g.node(m))) {
        sums.insert(g.node(m).outputs[0]);
      } else {
        rows = rows || row_op(g, g.node(m)) != nullptr;
      }
    }
    if (sums.empty()) return true;
    if (rows) return false;
    for (int m : members) {
      for (const auto& in : g.node(m).inputs) {
        if (in.value >= 0 && sums.count(in.value)) return false;
      }
    }
    return true;
  }

  // A norm backward's weight and bias gradients are summed over all rows by blocks of their own,
  // which compute only what needs no reduction: its operands may not depend on a reduction of
  // the group, and no member may read those gradients (they are complete when the kernel ends).
  // Those blocks also read rows that the row blocks may have written by then: no member may
  // write in place a tensor that the norm backward's inputs are computed from.
  // nll_loss_forward's loss is one value for all rows, complete when the kernel ends, too; a
  // kernel has one workspace: at most one member sums over all rows.
  bool all_rows_plain(const std::vector<int>& members) const {
    int all_rows = 0;
    for (int m : members) {
      const RowOp* r = row_op(g, g.node(m));
      all_rows += r != nullptr && r->sums_all_rows() ? 1 : 0;
    }
    if (all_rows > 1) return false;
    std::set<int> needed, loaded, written;
    const std::set<int> mine(members.begin(), members.end());
    for (auto it = members.rbegin(); it != members.rend(); ++it) {
      const Node& n = g.node(*it);
      const RowOp* r = row_op(g, n);
      bool need = r != nullptr && r->norm_backward();
      for (int v : n.outputs) need = need || needed.count(v) > 0;
      for (const auto& in : n.inputs) {
        if (in.value < 0) continue;
        if (in.written) written.insert(g.value(in.value).tensor);
        if (!need) continue;
        needed.insert(in.value);
        const int producer = g.value(in.value).producer;
        if (producer < 0 || !mine.count(producer)) loaded.insert(g.value(in.value).tensor);
      }
    }
    for (int t : written)
      if (loaded.count(t)) return false;
    std::set<int> reduced, late;
    for (int m : members) {
      const Node& n = g.node(m);
      const RowOp* r = row_op(g, n);
      bool depends = false;
      for (const auto& in : n.inputs) {
        if (in.value < 0) continue;
        if (late.count(in.value)) return false;
        depends = depends || reduced.count(in.value) > 0;
      }
      if (r != nullptr && r->norm_backward()) {
        if (depends) return false;
        for (std::size_t k = 1; k < n.outputs.size(); ++k) late.insert(n.outputs[k]);
      }
      if (r != nullptr && r->kind == RowOp::Kind::NllLoss)
        late.insert(n.outputs.begin(), n.outputs.end());
      if (depends || (r != nullptr && r->reduces())) {
        for (int v : n.outputs) reduced.insert(v);
      }
    }
    return true;
  }

  // Every member iterates over the group's domain, but for pointwise ops over one value per row
  // in a group that reduces rows. Merging groups may not break it: a reduction over one value
  // per row ([rows, 1], its own rows of one element) in a group over [rows, n] would sum the
  // value over the whole row.
  bool one_domain(const std::vector<int>& members) const {
    const TensorMeta& dom = group_domain(g, members);
    const bool rows = reduces_rows(g, members);
    return std::all_of(members.begin(), members.end(),
                       [&](int m) { return fits(g, g.node(m), dom, rows); });
  }

  // A stack or cat is stored by pointwise kernels alone, and its result is complete only when
  // the kernel ends: no member reads it.
  bool sinks_pointwise(const std::vector<int>& members) const {
    bool other = false;
    std::set<int> results;
    for (int m : members) {
      const Node& n = g.node(m);
      for (const auto& in : n.inputs)
        if (in.value >= 0 && results.count(in.value)) return false;
      if (is_sink(n))
        results.insert(n.outputs[0]);
      else
        other = other || find_pointwise(n) == nullptr;
    }
    return results.empty() || !other;
  }

  bool legal(const std::vector<int>& members) const {
    if (members.size() > kMaxGroupNodes || !sinks_pointwise(members)) return false;
    if (!one_domain(members) || !rows_kept(members) || !columns_apart(members) ||
        !total_alone(members) || !all_rows_plain(members))
      return false;
    const std::set<int> mine(members.begin(), members.end());
    const std::set<int> values = produced(members);
    const bool contiguous_only = writes_outside(members);
    for (int k = members.front() + 1; k < members.back(); ++k) {
      if (mine.count(k)) continue;
      if (contiguous_only) return false;
      const Node& n = g.node(k);
      if (n.mutates()) return false;
      for (const auto& in : n.inputs) {
        if (in.value >= 0 && values.count(in.value)) return false;
      }
    }
    return true;
  }
};

}  // namespace

std::string unfusable_reason(const Graph& g, const Node& n) {
  if (is_sink(n)) return sink_check(g, n);
  if (is_column_sum(g, n)) return column_sum_check(g, n);
  if (is_total_reduction(n)) return total_reduction_check(g, n);
  if (const RowOp* r = find_row_op(n)) {
    if (std::string why = row_op_check(g, n); !why.empty()) return why;
    if (n.outputs.size() != static_cast<std::size_t>(r->outputs)) return "unexpected outputs";
    for (std::size_t k = 0; k < n.outputs.size(); ++k) {
      if (n.out_alias[k] >= 0) return "an output aliases an argument";
      const TensorMeta& o = g.value(n.outputs[k]).meta;
      // A norm backward's input gradient not asked for (row_op_check looks at its output_mask).
      if (!o.defined && k == 0 && r->norm_backward()) continue;
      if (!o.defined || !float_type(o.dtype)) return "output is not fp32/fp16/bf16";
      if (o.numel() == 0) return "empty";
      if (!is_contiguous(o)) return "output is not contiguous";
    }
    const TensorMeta& out = g.value(n.input_at(r->tensors[0])).meta;  // device of the operands
    std::vector<int> operands = r->tensors;
    if (r->kind == RowOp::Kind::LayerNorm) operands = {0, 2, 3};
    if (r->kind == RowOp::Kind::RmsNorm) operands = {0, 2};
    if (r->norm_backward()) {
      const RowOp::NormBackwardArgs a = r->norm_args();
      operands = {0, 1, a.mean, a.rstd, a.weight, a.bias};
    }
    // Not the target (int64), nor the gradient (one value per row, expanded from a scalar
    // when the loss was summed: row_op_check looks at it).
    if (r->kind == RowOp::Kind::NllLossBackward) operands = {1, 6};
    for (int t : operands) {
      if (t < 0 || n.input_at(t) < 0) continue;  // no weight or bias
      const TensorMeta& m = g.value(n.input_at(t)).meta;
      if (m.device != out.device) return "operands on several devices";
      if (!float_type(m.dtype)) return "operand dtype";
      if (!is_contiguous(m)) return "operand is not contiguous";
    }
    return {};
  }
  const PointwiseOp* op = find_pointwise(n);
  if (op == nullptr) return "not a pointwise op";
  if (std::string why = op->check(n); !why.empty()) return why;
  if (n.outputs.size() != 1) return "not one output";
  const TensorMeta& out = g.value(n.outputs[0]).meta;
  if (!out.defined || !float_type(out.dtype)) return "output is not fp32/fp16/bf16";
  if (out.numel() == 0) return "empty";
  const int alias = n.out_alias[0];
  if (alias != op->writes) return "output aliasing differs from the op table";
  if (alias < 0 && out.storage_offset != 0) return "output has a storage offset";
  auto operand_ok = [&](int arg) -> std::string {
    const int v = n.input_at(arg);
    if (v < 0) return "undefined tensor operand";
    const TensorMeta& m = g.value(v).meta;
    if (m.device != out.device) return "operands on several devices";
    if (!float_type(m.dtype) && m.dtype != c10::ScalarType::Bool) return "operand dtype";
    if (!broadcastable(m, out)) return "operand does not broadcast to the output";
    return {};
  };
  for (int a : op->tensors) {
    if (std::string why = operand_ok(a); !why.empty()) return why;
  }
  if (op->writes >= 0) {
    if (std::string why = operand_ok(op->writes); !why.empty()) return why;
    const TensorMeta& w = g.value(n.input_at(op->writes)).meta;
    if (w.sizes != out.sizes || w.strides != out.strides) return "in-place target shape";
    for (std::size_t d = 0; d < w.sizes.size(); ++d) {
      if (w.sizes[d] > 1 && w.strides[d] == 0) return "in-place target is expanded";
    }
  }
  for (int s : op->scalars) {
    if (static_cast<std::size_t>(s) >= n.args.size()) return "missing scalar argument";
    const auto& v = n.args[s];
    if (!v.isNone() && !(v.isDouble() || v.isInt() || v.isBool())) return "complex scalar";
  }
  return {};
}

Partition partition_graph(const Graph& g) {
  Builder b{g, {}, std::vector<int>(g.nodes().size(), -1)};
  Partition p;
  p.eager_why.assign(g.nodes().size(), "");
  for (const Node& n : g.nodes()) {
    if (std::string why = unfusable_reason(g, n); !why.empty()) {
      p.eager_why[static_cast<std::size_t>(n.index)] = why;
      continue;
    }
    // Groups that produced one of this node's operands, over the same domain.
    std::vector<int> cands;
    for (const auto& in : n.inputs) {
      if (in.value < 0) continue;
      const int producer = g.value(in.value).producer;
      if (producer < 0) continue;
      const int grp = b.group_of[static_cast<std::size_t>(producer)];
      if (grp < 0 || std::find(cands.begin(), cands.end(), grp) != cands.end()) continue;
      const auto& members = b.groups[static_cast<std::size_t>(grp)];
      if (!fits(g, n, group_domain(g, members), reduces_rows(g, members))) continue;
      cands.push_back(grp);
    }
    auto with = [&](const std::vector<int>& gs) {
      std::vector<int> m;
      for (int x : gs) {
        const auto& nodes = b.groups[static_cast<std::size_t>(x)];
        m.insert(m.end(), nodes.begin(), nodes.end());
      }
      m.push_back(n.index);
      std::sort(m.begin(), m.end());
      return m;
    };
    std::vector<int> chosen;  // groups that n joins (merged into the first)
    if (cands.size() > 1 && b.legal(with(cands))) {
      chosen = cands;
    } else {
      // The candidate whose last node is latest first.
      std::sort(cands.begin(), cands.end(), [&](int x, int y) {
        return b.groups[static_cast<std::size_t>(x)].back() >
               b.groups[static_cast<std::size_t>(y)].back();
      });
      for (int c : cands) {
        if (b.legal(with({c}))) {
          chosen = {c};
          break;
        }
      }
    }
    int target = static_cast<int>(b.groups.size());
    if (chosen.empty()) {
      b.groups.push_back({n.index});
    } else {
      target = chosen.front();
      std::vector<int> members = with(chosen);
      for (std::size_t c = 1; c < chosen.size(); ++c)
        b.groups[static_cast<std::size_t>(chosen[c])].clear();
      b.groups[static_cast<std::size_t>(target)] = std::move(members);
    }
    for (int m : b.groups[static_cast<std::size_t>(target)])
      b.group_of[static_cast<std::size_t>(m)] = target;
  }

  p.group_of.assign(g.nodes().size(), -1);
  for (const auto& nodes : b.groups) {
    // A group merged into another by a node that joined both is left empty: nothing of it.
    if (nodes.empty()) continue;
    // Alone, a node is worth a kernel only where eager runs more than one for it: a column sum
    // (ATen: a memset, then the reduction), mse_loss (the squared differences, then the mean),
    // a norm's backward (the input's gradient, then the weight's and bias's), nll_loss_backward
    // (a fill, then the targets' column) or an op of the table that says so.
    const Node& first = g.node(nodes.front());
    const PointwiseOp* only = find_pointwise(first);
    const RowOp* row = row_op(g, first);
    const bool alone_pays = is_column_sum(g, first) || is_total_reduction(first) ||
                            (only != nullptr && only->alone_pays) ||
                            (row != nullptr && row->alone_pays());
    if (nodes.size() < 2 && !alone_pays) {
      for (int m : nodes) p.eager_why[static_cast<std::size_t>(m)] = "alone (nothing to fuse with)";
      continue;
    }
    FusionGroup fg;
    fg.nodes = nodes;
    fg.domain = group_domain(g, nodes);
    // One kind per group: legal() keeps column sums apart from rows, a total reduction alone.
    for (int m : nodes) {
      if (row_op(g, g.node(m)) != nullptr) fg.kind = GroupKind::Rows;
      if (is_column_sum(g, g.node(m))) fg.kind = GroupKind::Columns;
      if (is_total_reduction(g.node(m))) fg.kind = GroupKind::Total;
    }
    std::string name, previous;
    for (int m : nodes) {
      std::string op = g.node(m).name.substr(g.node(m).name.rfind(':') + 1);
      if (!op.empty() && op.back() == '_') op.pop_back();
      if (op == previous) continue;
      if (name.size() + op.size() > 48) break;
      name += (name.empty() ? "" : "_") + op;
      previous = op;
    }
    fg.name = name;
    for (int m : nodes) p.group_of[static_cast<std::size_t>(m)] = static_cast<int>(p.groups.size());
    p.groups.push_back(std::move(fg));
  }
  return p;
}

std::string Partition::to_text(const Graph& g) const {
  std::ostringstream os;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const auto& grp = groups[i];
    os << "group " << i << " " << grp.name << " over " << format_meta(grp.domain)
       << (grp.rows() ? " by rows" : "") << (grp.columns() ? " by columns" : "")
       << (grp.total() ? " to one value" : "") << ":";
    for (int m : grp.nodes) os << " " << m << ":" << g.node(m).short_name();
    os << "\n";
  }
  for (std::size_t n = 0; n < group_of.size(); ++n) {
    if (group_of[n] < 0)
      os << "eager " << n << ":" << g.node(static_cast<int>(n)).short_name() << " (" << eager_why[n]
         << ")\n";
  }
  return os.str();
}

}  // namespace hotpath::detail
