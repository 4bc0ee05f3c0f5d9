// Row kernels: fusion groups that reduce along the last dimension (codegen/kernel.h).
//
// The group's domain is [rows, C] (C: the last dimension). Every value is either per element of a
// row ("full": loads, pointwise results, softmax outputs) or per row (sums, means, the maximum and
// normaliser of a softmax, and operands of shape [..., 1]). A reduction whose input needs per-row
// values of level k has level k + 1; the kernel makes one pass over the row per level, computing
// that level's reductions (recomputing the pointwise values they need from the loads, which hit
// the cache), and a last pass that stores the full outputs. Math is fp32, as in ATen's kernels.
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "codegen/kernel.h"
#include "common/error.h"
#include "common/hash.h"
#include "fusion/op_table.h"

namespace hotpath::detail {
namespace {

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

std::vector<std::int64_t> sizes_of(const TensorMeta& m, std::size_t rank) {
  std::vector<std::int64_t> s(rank - std::min(rank, m.sizes.size()), 1);
  s.insert(s.end(), m.sizes.begin(), m.sizes.end());
  return s;
}

constexpr std::int64_t kWarpCols = 1024;
constexpr std::int64_t kCachedRegisters = 96;  // floats per lane for a row's loads
// Sums over all rows (a norm backward's weight gradient): at most this many chunks of rows per
// column tile, whose partial sums the tile's last block adds up; row blocks: at most this many
// (they stride over the rows).
constexpr std::int64_t kMaxChunks = 64;
constexpr std::int64_t kMaxRowBlocks = 2048;
constexpr int kColumnUnroll = 4;  // rows in flight per warp of a column block

}  // namespace

KernelSpec generate_row_kernel(const Graph& g, const FusionGroup& group) {
  KernelSpec spec;
  spec.not_interpretable = "a reduction along rows";
  const TensorMeta& dom = group.domain;
  HOTPATH_CHECK(!dom.sizes.empty(), "a row kernel needs at least one dimension");
  const std::size_t rank = dom.sizes.size();
  const std::int64_t cols = dom.sizes.back();
  const std::vector<std::int64_t> dsizes(dom.sizes.begin(), dom.sizes.end());
  std::vector<std::int64_t> row_sizes = dsizes;
  row_sizes.back() = 1;
  // How operands are indexed: the whole domain, one value per row, one row for every row.
  const std::vector<std::int64_t> full_strides = contiguous_strides(dsizes);
  const std::vector<std::int64_t> row_strides = contiguous_strides(row_sizes);
  std::vector<std::int64_t> col_sizes(rank, 1);
  col_sizes.back() = cols;
  const std::vector<std::int64_t> col_strides = contiguous_strides(col_sizes);
  spec.numel = dom.numel();
  spec.rows = cols > 0 ? spec.numel / cols : 0;
  // Rows of up to kWarpCols elements: one warp per row, reductions by shuffles alone (no block
  // barrier per reduction); longer rows: one block per row.
  const bool warp_rows = cols <= kWarpCols;
  spec.block = 32;
  while (spec.block < 256 && (warp_rows || spec.block < cols)) spec.block *= 2;
  spec.rows_per_block = warp_rows ? spec.block / 32 : 1;
  GroupParams params(g, group, spec);

  std::vector<Def> defs;
  std::map<std::string, std::size_t> def_of;
  std::vector<Reduction> reds;
  std::map<int, std::string> var;    // value id -> name
  std::map<int, int> final_version;  // tensor -> its last value in the group
  struct ColumnSum {
    std::string input;  // a full value, summed over all rows
    std::size_t param;  // the output: one value per column
  };
  std::vector<ColumnSum> col_sums;
  // nll_loss_forward: its per-row loss and count (row values), summed over all rows into its
  // two outputs at the end of the kernel.
  struct Total {
    std::string loss, count;
    std::size_t loss_param = 0, count_param = 0;
    bool mean = false;
  };
  std::optional<Total> total;
  auto add = [&](Def d) -> const std::string& {
    for (const std::string& dep : d.deps) {
      const Def& x = defs[def_of.at(dep)];
      d.level = std::max(d.level, x.level);
    }
    def_of[d.name] = defs.size();
    defs.push_back(std::move(d));
    return defs.back().name;
  };
  auto reduce = [&](const std::string& input, bool max) {
    Reduction r;
    r.input = input;
    r.max = max;
    r.level = defs[def_of.at(input)].level + 1;
    r.result = "r" + std::to_string(reds.size());
    reds.push_back(r);
    Def d;
    d.name = r.result;
    d.row = true;
    d.level = r.level;
    def_of[d.name] = defs.size();
    defs.push_back(d);
    return r.result;
  };
  // A 1-D tensor from outside with one value per row (nll's targets, its unreduced gradient):
  // fp32 as every value; an int64 class index converts exactly (below kMaxClasses).
  auto row_operand = [&](int v) -> std::string {
    if (const auto it = var.find(v); it != var.end()) return it->second;
    HOTPATH_CHECK(!params.in_group(v), "value %", v, " used before it is computed");
    const std::size_t p = params.tensor(v);
    const TensorMeta& m = *params.meta_of_param.at(static_cast<int>(p));
    HOTPATH_CHECK(m.sizes.size() == 1 && m.numel() == spec.rows, format_meta(m),
                  " is not one value per row");
    KernelArg& a = spec.args[p];
    a.name = "t" + std::to_string(p);
    Def d;
    d.name = "x" + std::to_string(v);
    d.row = true;
    const std::string index = m.strides[0] == 0   ? std::string("0")
                              : m.strides[0] == 1 ? std::string("row")
                                                  : "row * " + std::to_string(m.strides[0]);
    const std::string load = a.name + "[" + index + "]";
    d.expr = a.dtype == c10::ScalarType::Long ? "static_cast<float>(" + load + ")"
                                              : "hp::to_float(" + load + ")";
    var[v] = add(d);
    return var[v];
  };
  // The name of an operand: a value of the group, or a load of a tensor from outside.
  auto operand = [&](int v) -> std::string {
    if (const auto it = var.find(v); it != var.end()) return it->second;
    HOTPATH_CHECK(!params.in_group(v), "value %", v, " used before it is computed");
    const std::size_t p = params.tensor(v);
    const TensorMeta& m = *params.meta_of_param.at(static_cast<int>(p));
    KernelArg& a = spec.args[p];
    a.name = "t" + std::to_string(p);
    // Strides over the domain's dimensions, 0 where broadcast (expanded or of size 1).
    const std::vector<std::int64_t> st = domain_strides(m, dom);
    Def d;
    d.name = "x" + std::to_string(v);
    if (std::all_of(st.begin(), st.end(), [](std::int64_t x) { return x == 0; })) {
      a.single = true;
      d.row = true;
      d.expr = "hp::to_float(" + a.name + "[0])";
    } else if (st == full_strides) {
      a.linear = true;
      d.load = true;
      d.expr = "hp::to_float(" + a.name + "[base + c])";
    } else if (st == row_strides) {
      d.row = true;
      d.expr = "hp::to_float(" + a.name + "[row])";
    } else if (st == col_strides) {
      d.load = true;
      d.expr = "hp::to_float(" + a.name + "[c])";  // one row for all
    } else {
      // Broadcast some other way (an attention mask [T, T] over [B, H, T, T]): the leading
      // indices from the row number, the last one from the column.
      std::string index;
      std::int64_t inner = 1;  // rows per step of dimension d
      for (std::size_t d = rank - 1; d-- > 0;) {
        if (st[d] != 0) {
          index += (index.empty() ? "" : " + ") + std::string("(row / ") + std::to_string(inner) +
                   " % " + std::to_string(dsizes[d]) + ") * " + std::to_string(st[d]);
        }
        inner *= dsizes[d];
      }
      if (st[rank - 1] != 0)
        index += (index.empty() ? "" : " + ") + std::string("c * ") + std::to_string(st[rank - 1]);
      d.load = true;
      d.expr = "hp::to_float(" + a.name + "[" + index + "])";
    }
    var[v] = add(d);
    return var[v];
  };

  for (std::size_t mi = 0; mi < group.nodes.size(); ++mi) {
    const Node& n = g.node(group.nodes[mi]);
    const int out = n.outputs[0];
    const auto dt = g.value(out).meta.dtype;
    const std::string name = "v" + std::to_string(mi);
    int written = -1;  // value whose tensor receives the result
    if (const RowOp* r = find_row_op(n)) {
      std::vector<std::string> t;
      if (r->kind != RowOp::Kind::NllLossBackward)  // reads nothing of `self` but its shape
        for (int a : r->tensors) t.push_back(operand(n.input_at(a)));
      Def d;
      d.name = name;
      using K = RowOp::Kind;
      switch (r->kind) {
        case K::Sum:
        case K::Mean: {
          const std::string s = reduce(t[0], false);
          d.row = true;
          d.expr = r->kind == K::Sum ? s : "(" + s + " / " + float_literal(double(cols)) + ")";
          d.deps = {s};
          break;
        }
        case K::Softmax:
        case K::LogSoftmax: {
          const std::string m = reduce(t[0], true);
          Def e;
          e.name = name + "_exp";
          e.expr = "expf(" + t[0] + " - " + m + ")";
          e.deps = {t[0], m};
          const std::string s = reduce(add(e), false);
          d.expr = r->kind == K::Softmax ? "(" + e.name + " / " + s + ")"
                                         : "(" + t[0] + " - " + m + " - logf(" + s + "))";
          d.deps = {t[0], e.name, m, s};
          break;
        }
        case K::SoftmaxBackward: {  // (grad_output, output): output * (grad_output - sum(g*o))
          Def p;
          p.name = name + "_prod";
          p.expr = "(" + t[0] + " * " + t[1] + ")";
          p.deps = {t[0], t[1]};
          const std::string s = reduce(add(p), false);
          d.expr = "(" + t[1] + " * (" + t[0] + " - " + s + "))";
          d.deps = {t[0], t[1], s};
          break;
        }
        case K::LogSoftmaxBackward: {  // grad_output - exp(output) * sum(grad_output)
          const std::string s = reduce(t[0], false);
          d.expr = "(" + t[0] + " - expf(" + t[1] + ") * " + s + ")";
          d.deps = {t[0], t[1], s};
          break;
        }
        case K::LayerNorm: {
          // mean = sum(x) / C; rstd = rsqrt(sum((x - mean)^2) / C + eps) (the biased variance,
          // as ATen; rsqrtf as its CUDA kernel); out = (x - mean) * rstd * weight + bias.
          const std::string c = float_literal(double(cols));
          Def mean;
          mean.name = name + "_mean";
          mean.row = true;
          const std::string s1 = reduce(t[0], false);
          mean.expr = "(" + s1 + " / " + c + ")";
          mean.deps = {s1};
          add(mean);
          Def centered;
          centered.name = name + "_centered";
          centered.expr = "(" + t[0] + " - " + mean.name + ")";
          centered.deps = {t[0], mean.name};
          add(centered);
          Def square;
          square.name = name + "_square";
          square.expr = "(" + centered.name + " * " + centered.name + ")";
          square.deps = {centered.name};
          const std::string s2 = reduce(add(square), false);
          Def rstd;
          rstd.name = name + "_rstd";
          rstd.row = true;
          rstd.expr =
              "rsqrtf(" + s2 + " / " + c + " + " + float_literal(n.args[4].toDouble()) + ")";
          rstd.deps = {s2};
          add(rstd);
          d.expr = "(" + centered.name + " * " + rstd.name + ")";
          d.deps = {centered.name, rstd.name};
          for (int a : {2, 3}) {
            if (n.input_at(a) < 0) continue;
            const std::string w = operand(n.input_at(a));
            d.expr = a == 2 ? "(" + d.expr + " * " + w + ")" : "(" + d.expr + " + " + w + ")";
            d.deps.push_back(w);
          }
          // Outputs 1 and 2: the mean and rstd, one per row, in their own dtype.
          for (int k : {1, 2}) {
            const int v = n.outputs[static_cast<std::size_t>(k)];
            Def o;
            o.name = name + "_out" + std::to_string(k);
            o.row = true;
            o.expr = round_to_dtype(k == 1 ? mean.name : rstd.name, g.value(v).meta.dtype);
            o.deps = {k == 1 ? mean.name : rstd.name};
            var[v] = add(o);
            spec.args[params.tensor(v)].written = true;
            final_version[g.value(v).tensor] = v;
          }
          break;
        }
        case K::RmsNorm: {
          // rstd = rsqrt(sum(x^2) / C + eps); out = x * rstd * weight (ATen's fused rms_norm).
          Def square;
          square.name = name + "_square";
          square.expr = "(" + t[0] + " * " + t[0] + ")";
          square.deps = {t[0]};
          const std::string s2 = reduce(add(square), false);
          Def rstd;
          rstd.name = name + "_rstd";
          rstd.row = true;
          rstd.expr = "rsqrtf(" + s2 + " / " + float_literal(double(cols)) + " + " +
                      float_literal(n.args[3].toDouble()) + ")";
          rstd.deps = {s2};
          add(rstd);
          d.expr = "(" + t[0] + " * " + rstd.name + ")";
          d.deps = {t[0], rstd.name};
          if (n.input_at(2) >= 0) {
            const std::string w = operand(n.input_at(2));
            d.expr = "(" + d.expr + " * " + w + ")";
            d.deps.push_back(w);
          }
          const int v = n.outputs[1];
          Def o;
          o.name = name + "_out1";
          o.row = true;
          o.expr = round_to_dtype(rstd.name, g.value(v).meta.dtype);
          o.deps = {rstd.name};
          var[v] = add(o);
          spec.args[params.tensor(v)].written = true;
          final_version[g.value(v).tensor] = v;
          break;
        }
        case K::NllLoss: {
          // Per row: minus the score at the target column (0 when it is ignore_index), and
          // whether it counts; ATen's total_weight is the count (no class weights).
          const std::string target = row_operand(n.input_at(1));
          const std::string kept =
              "(" + target + " != " + float_literal(double(n.args[4].toInt())) + ")";
          Def picked;
          picked.name = name + "_picked";
          picked.expr =
              "((static_cast<float>(c) == " + target + " && " + kept + ") ? -" + t[0] + " : 0.0f)";
          picked.deps = {target, t[0]};
          Def count;
          count.name = name + "_count";
          count.row = true;
          count.expr = "(" + kept + " ? 1.0f : 0.0f)";
          count.deps = {target};
          Total tot;
          tot.loss = reduce(add(picked), false);
          tot.count = add(count);
          tot.loss_param = params.tensor(n.outputs[0]);
          tot.count_param = params.tensor(n.outputs[1]);
          tot.mean = n.args[3].toInt() == 1;
          spec.args[tot.loss_param].written = true;
          spec.args[tot.count_param].written = true;
          total = tot;
          continue;  // its outputs are stored at the end of the kernel, not per row
        }
        case K::NllLossBackward: {
          // As ATen's kernels: -(grad / total_weight) (mean), -grad (sum) or -grad[row] (none)
          // at the row's target column unless it is ignore_index; 0 elsewhere.
          const std::int64_t reduction = n.args[4].toInt();
          const std::string target = row_operand(n.input_at(2));
          const std::string grad =
              reduction == 0 ? row_operand(n.input_at(0)) : operand(n.input_at(0));
          Def value;
          value.name = name + "_value";
          value.row = true;
          if (reduction == 1) {
            const std::string total = operand(n.input_at(6));
            value.expr = "(-(" + grad + " / " + total + "))";
            value.deps = {grad, total};
          } else {
            value.expr = "(-" + grad + ")";
            value.deps = {grad};
          }
          add(value);
          d.expr = "((static_cast<float>(c) == " + target + " && " + target +
                   " != " + float_literal(double(n.args[5].toInt())) + ") ? " + value.name +
                   " : 0.0f)";
          d.deps = {target, value.name};
          break;
        }
        case K::LayerNormBackward:
        case K::RmsNormBackward: {
          // As ATen's kernels (layer_norm_kernel.cu): with xhat = (x - mean) * rstd (no mean for
          // rms) and gw = grad_out * weight, grad_input = (C * gw - xhat * sum(gw * xhat) -
          // sum(gw)) * rstd / C (no sum(gw) for rms); grad_weight sums grad_out * xhat over all
          // rows, grad_bias sums grad_out.
          const RowOp::NormBackwardArgs a = r->norm_args();
          const std::string& dy = t[0];
          const std::string& x = t[1];
          const std::string rstd = operand(n.input_at(a.rstd));
          Def xhat;
          xhat.name = name + "_xhat";
          if (a.mean >= 0) {
            const std::string mean = operand(n.input_at(a.mean));
            xhat.expr = "((" + x + " - " + mean + ") * " + rstd + ")";
            xhat.deps = {x, mean, rstd};
          } else {
            xhat.expr = "(" + x + " * " + rstd + ")";
            xhat.deps = {x, rstd};
          }
          add(xhat);
          const std::string w = operand(n.input_at(a.weight));
          Def dyx;
          dyx.name = name + "_dyx";
          dyx.expr = "(" + dy + " * " + xhat.name + ")";
          dyx.deps = {dy, xhat.name};
          col_sums.push_back({add(dyx), params.tensor(n.outputs[1])});
          if (a.bias >= 0) col_sums.push_back({dy, params.tensor(n.outputs[2])});
          for (std::size_t k = 1; k < n.outputs.size(); ++k)
            spec.args[params.tensor(n.outputs[k])].written = true;
          // The input needs no gradient (output_mask[0] false: a norm on the model's input):
          // only the column blocks have work.
          if (!g.value(out).meta.defined) continue;
          Def gw;
          gw.name = name + "_gw";
          gw.expr = "(" + dy + " * " + w + ")";
          gw.deps = {dy, w};
          add(gw);
          Def gwx;
          gwx.name = name + "_gwx";
          gwx.expr = "(" + gw.name + " * " + xhat.name + ")";
          gwx.deps = {gw.name, xhat.name};
          const std::string s2 = reduce(add(gwx), false);
          std::string e = "(" + float_literal(double(cols)) + " * " + gw.name + " - " + xhat.name +
                          " * " + s2 + ")";
          d.deps = {gw.name, xhat.name, s2, rstd};
          if (a.mean >= 0) {
            const std::string s1 = reduce(gw.name, false);
            e = "(" + e + " - " + s1 + ")";
            d.deps.push_back(s1);
          }
          d.expr = "(" + e + " * (" + rstd + " * " + float_literal(1.0 / double(cols)) + "))";
          break;
        }
      }
      d.expr = round_to_dtype(d.expr, dt);
      var[out] = add(d);
      written = out;
    } else {
      const PointwiseOp* op = find_pointwise(n);
      HOTPATH_CHECK(op != nullptr, "node ", n.index, " (", n.short_name(), ") is not fusable");
      Def d;
      d.name = name;
      std::vector<std::string> t, s;
      for (int a : op->tensors) {
        t.push_back(operand(n.input_at(a)));
        d.deps.push_back(t.back());
      }
      for (int a : op->scalars) {
        if (n.args[static_cast<std::size_t>(a)].isNone()) {
          s.emplace_back();
          continue;
        }
        const std::string sname = "s" + std::to_string(spec.args.size());
        params.scalar(static_cast<int>(mi), a, sname);
        s.push_back(sname);
      }
      d.expr = pointwise_expression(g, n, *op, t, s);
      // One value per row (a norm's epsilon and rsqrt): computed once per row, from row values.
      // Rows of one element ([..., 1]) have values of that shape per element too: a value is a
      // row's only when all it is made of is.
      d.row = sizes_of(g.value(out).meta, rank) == row_sizes &&
              std::all_of(d.deps.begin(), d.deps.end(),
                          [&](const std::string& dep) { return defs[def_of.at(dep)].row; });
      HOTPATH_CHECK(d.row || sizes_of(g.value(out).meta, rank) == dsizes || cols == 1,
                    n.short_name(), " makes one value per row from a value per element");
      var[out] = add(d);
      written = op->writes >= 0 ? n.input_at(op->writes) : out;
    }
    KernelArg& p = spec.args[params.tensor(written)];
    p.written = true;
    final_version[g.value(out).tensor] = out;
  }

  // Stores: the last version of each tensor the group writes, per element or (thread 0) per row.
  std::vector<std::pair<std::size_t, std::string>> full_stores, row_stores;
  for (const auto& [tensor, value] : final_version) {
    const std::size_t idx = static_cast<std::size_t>(params.param_of_tensor.at(tensor));
    KernelArg& a = spec.args[idx];
    if (!a.written) continue;
    a.name = "t" + std::to_string(idx);
    a.optional = a.output >= 0 && !made_by_last(g, group, tensor);
    const Def& d = defs[def_of.at(var.at(value))];
    const TensorMeta& m = *params.meta_of_param.at(static_cast<int>(idx));
    const std::vector<std::int64_t> s = sizes_of(m, rank);
    if (d.row) {
      HOTPATH_CHECK(m.numel() == spec.rows && is_contiguous(m), "a per-row result ", format_meta(m),
                    " is not one contiguous value per row");
      row_stores.emplace_back(idx, d.name);
    } else {
      HOTPATH_CHECK(s == dsizes && is_contiguous(m), "a row kernel writes ", format_meta(m),
                    ", not the whole domain ", format_meta(dom));
      full_stores.emplace_back(idx, d.name);
    }
  }

  // The values `targets` need, in definition order: the full ones (a pass over the row), or with
  // `rows` the per-row ones too, none of which may depend on a reduction (a column block's values:
  // the partitioner keeps groups that would need one apart).
  auto closure = [&](const std::vector<std::string>& targets, bool rows = false) {
    std::set<std::size_t> need;
    std::vector<std::string> work = targets;
    while (!work.empty()) {
      const std::size_t i = def_of.at(work.back());
      work.pop_back();
      if ((defs[i].row && !rows) || !need.insert(i).second) continue;
      HOTPATH_CHECK(!rows || defs[i].level == 0, "a sum over rows of ", defs[i].name,
                    ", which depends on a reduction of the row");
      for (const std::string& dep : defs[i].deps) work.push_back(dep);
    }
    return need;
  };
  // Outputs stored once at the end (sums over all rows): named, optional unless the last member
  // makes them.
  auto name_output = [&](std::size_t p) {
    KernelArg& a = spec.args[p];
    a.name = "t" + std::to_string(p);
    a.optional = !made_by_last(g, group, params.tensor_of(p));
  };
  for (const ColumnSum& cs : col_sums) {
    name_output(cs.param);
    const TensorMeta& m = *params.meta_of_param.at(static_cast<int>(cs.param));
    HOTPATH_CHECK(m.numel() == cols && is_contiguous(m), "a sum over rows ", format_meta(m),
                  " is not one contiguous value per column");
  }
  // The loss's outputs, one value each, optional unless returned.
  if (total) {
    for (std::size_t p : {total->loss_param, total->count_param}) name_output(p);
  }
  const bool column_blocks = !col_sums.empty();
  const int warps = spec.block / 32;
  const std::int64_t tiles = (cols + 31) / 32;
  const std::int64_t chunk_rows =
      std::max<std::int64_t>(warps * 16, (spec.rows + kMaxChunks - 1) / kMaxChunks);
  const std::int64_t chunks = std::max<std::int64_t>(1, (spec.rows + chunk_rows - 1) / chunk_rows);
  // No row blocks where they would store nothing (a norm backward whose input needs no
  // gradient, alone): the column blocks are the kernel.
  const bool row_work = !full_stores.empty() || !row_stores.empty() || total.has_value();
  HOTPATH_CHECK(row_work || !col_sums.empty(), "a row kernel that stores nothing");
  const std::int64_t row_blocks =
      row_work ? std::clamp<std::int64_t>(
                     (spec.rows + spec.rows_per_block - 1) / spec.rows_per_block, 1, kMaxRowBlocks)
               : 0;
  if (column_blocks) {
    HOTPATH_CHECK(row_blocks + tiles * chunks < (1LL << 31), "too many blocks for ",
                  format_meta(dom));
    spec.fixed_blocks = static_cast<int>(row_blocks + tiles * chunks);
    spec.counters_at = static_cast<std::int64_t>(col_sums.size()) * chunks * cols;
    spec.workspace_floats = spec.counters_at + tiles;
  }
  HOTPATH_CHECK(!(column_blocks && total), "a row kernel with two sums over all rows");
  if (total) {
    spec.fixed_blocks = static_cast<int>(row_blocks);
    spec.counters_at = 2 * row_blocks;  // a loss and a count per block, then the counter
    spec.workspace_floats = spec.counters_at + 1;
  }
  const bool fixed_grid = column_blocks || total;
  const std::string row_grid = fixed_grid ? "kRowBlocks" : "gridDim.x";
  const bool use64 = spec.numel > (1LL << 31) - 1;
  spec.index64 = use64;
  std::ostringstream src;
  src << "// hotpath fused row kernel: " << group.nodes.size() << " ops over " << format_meta(dom)
      << "\n//  ";
  for (int m : group.nodes) src << " " << g.node(m).short_name();
  src << "\n#include \"hotpath_runtime.cuh\"\n\n";
  src << "typedef " << (use64 ? "long long" : "int") << " idx_t;\n\n";
  src << kernel_signature(
      spec, fixed_grid ? ",\n    float* __restrict__ partial,\n    unsigned* done" : "");
  if (fixed_grid) src << "  constexpr unsigned kRowBlocks = " << row_blocks << ";\n";
  if (warp_rows) {
    src << "  const int lane = threadIdx.x & 31;\n";
    src << "  const idx_t first_row = static_cast<idx_t>(blockIdx.x) * (blockDim.x / 32) + "
           "threadIdx.x / 32;\n";
    src << "  const idx_t row_step = static_cast<idx_t>(" << row_grid << ") * (blockDim.x / 32);\n";
  } else {
    src << "  __shared__ float hp_smem[32];\n";
  }
  src << "  const idx_t kCols = " << cols << ";\n";
  src << "  const idx_t kRows = kNumel / kCols;\n";
  if (column_blocks) {
    // Blocks after the row blocks: chunk `chunk` of the rows for the 32 columns of `tile`.
    const std::size_t nsums = col_sums.size();
    src << "  if (blockIdx.x >= kRowBlocks) {  // sums over all rows\n";
    src << "    constexpr idx_t kTiles = " << tiles << ";\n";
    src << "    constexpr idx_t kChunkRows = " << chunk_rows << ";\n";
    src << "    constexpr unsigned kChunks = " << chunks << ";\n";
    src << "    constexpr int kWarps = " << warps << ";\n";
    src << "    __shared__ float hp_cols[" << nsums << "][kWarps][33];\n";
    src << "    __shared__ bool hp_last;\n";
    src << "    const unsigned item = blockIdx.x - kRowBlocks;\n";
    src << "    const idx_t tile = item % kTiles;\n";
    src << "    const unsigned chunk = item / kTiles;\n";
    src << "    const int hp_lane = threadIdx.x & 31;\n";
    src << "    const int hp_warp = threadIdx.x >> 5;\n";
    src << "    const idx_t c = tile * 32 + hp_lane;\n";
    for (std::size_t k = 0; k < nsums; ++k) src << "    float acc" << k << " = 0.0f;\n";
    src << "    if (c < kCols) {\n";
    src << "      const idx_t end = min(static_cast<idx_t>(chunk + 1) * kChunkRows, kRows);\n";
    src << "#pragma unroll " << kColumnUnroll << "\n";
    src << "      for (idx_t row = chunk * kChunkRows + hp_warp; row < end; row += kWarps) {\n";
    src << "        const idx_t base = row * kCols;\n";
    std::vector<std::string> inputs;
    for (const ColumnSum& cs : col_sums) inputs.push_back(cs.input);
    for (std::size_t i : closure(inputs, true))
      src << "        const float " << defs[i].name << " = " << defs[i].expr << ";\n";
    for (std::size_t k = 0; k < nsums; ++k)
      src << "        acc" << k << " += " << col_sums[k].input << ";\n";
    src << "      }\n    }\n";
    for (std::size_t k = 0; k < nsums; ++k)
      src << "    hp_cols[" << k << "][hp_warp][hp_lane] = acc" << k << ";\n";
    std::vector<std::string> stores;
    for (const ColumnSum& cs : col_sums) stores.push_back(column_store(spec.args[cs.param]));
    src << chunked_sum_epilogue({"hp_cols", "hp_warp", "hp_lane", "kWarps", "partial", "done"},
                                stores);
    src << "    return;\n  }\n";
  }
  // A warp per row: the row's loads are kept in registers (kPer per lane) when they fit, so that
  // every pass reads them from there, not from memory again.
  const std::int64_t per_lane = (cols + 31) / 32;
  std::int64_t full_loads = 0;
  for (const Def& d : defs) full_loads += d.load ? 1 : 0;
  const bool cached = warp_rows && full_loads * per_lane <= kCachedRegisters;
  std::string columns, close_columns = "    }\n";
  if (cached) {
    columns =
        "#pragma unroll\n    for (int j = 0; j < kPer; ++j) {\n"
        "      const idx_t c = lane + 32 * j;\n      if (c >= kCols) break;\n";
    src << "  constexpr int kPer = " << per_lane << ";\n";
  } else if (warp_rows) {
    columns = "    for (idx_t c = lane; c < kCols; c += 32) {\n";
  } else {
    columns = "    for (idx_t c = threadIdx.x; c < kCols; c += blockDim.x) {\n";
  }
  if (total) src << "  float hp_loss = 0.0f, hp_count = 0.0f;  // this warp's rows, in order\n";
  src << (warp_rows ? "  for (idx_t row = first_row; row < kRows; row += row_step) {\n"
                    : "  for (idx_t row = blockIdx.x; row < kRows; row += " + row_grid + ") {\n");
  src << "    const idx_t base = row * kCols;\n";
  if (cached) {
    for (const Def& d : defs) {
      if (!d.load) continue;
      src << "    float " << d.name << "_r[kPer];\n#pragma unroll\n"
          << "    for (int j = 0; j < kPer; ++j) {\n      const idx_t c = lane + 32 * j;\n"
          << "      " << d.name << "_r[j] = c < kCols ? " << d.expr << " : 0.0f;\n    }\n";
    }
  }
  std::set<std::string> emitted_rows;
  auto emit_rows = [&](int level) {
    for (const Def& d : defs) {
      if (d.row && d.level == level && !d.expr.empty() && emitted_rows.insert(d.name).second)
        src << "    const float " << d.name << " = " << d.expr << ";\n";
    }
  };
  auto emit_full = [&](const std::set<std::size_t>& need) {
    for (std::size_t i : need) {
      src << "      const float " << defs[i].name << " = "
          << (cached && defs[i].load ? defs[i].name + "_r[j]" : defs[i].expr) << ";\n";
    }
  };
  emit_rows(0);
  int levels = 0;
  for (const Reduction& r : reds) levels = std::max(levels, r.level);
  for (int level = 1; level <= levels; ++level) {
    std::vector<const Reduction*> now;
    std::vector<std::string> inputs;
    for (const Reduction& r : reds) {
      if (r.level != level) continue;
      now.push_back(&r);
      inputs.push_back(r.input);
    }
    src << "    // pass " << level << "\n";
    for (const Reduction* r : now)
      src << "    float " << r->result << "_acc = " << (r->max ? "hp::neg_inf()" : "0.0f") << ";\n";
    src << columns;
    emit_full(closure(inputs));
    for (const Reduction* r : now) {
      if (r->max) {
        src << "      " << r->result << "_acc = fmaxf(" << r->result << "_acc, " << r->input
            << ");\n";
      } else {
        src << "      " << r->result << "_acc += " << r->input << ";\n";
      }
    }
    src << close_columns;
    for (const Reduction* r : now)
      src << "    const float " << r->result << " = hp::" << (warp_rows ? "warp_" : "block_")
          << (r->max ? "max" : "sum") << "(" << r->result << "_acc"
          << (warp_rows ? "" : ", hp_smem") << ");\n";
    emit_rows(level);
  }
  std::vector<std::string> stored;
  for (const auto& st : full_stores) stored.push_back(st.second);
  if (!full_stores.empty()) {
    src << "    // stores\n";
    src << columns;
    emit_full(closure(stored));
    for (const auto& [idx, name] : full_stores) {
      const KernelArg& a = spec.args[idx];
      src << "      " << (a.optional ? "if (" + a.name + " != nullptr) " : "") << a.name
          << "[base + c] = hp::from_float<" << cuda_type(a.dtype) << ">(" << name << ");\n";
    }
    src << "    }\n";
  }
  if (!row_stores.empty()) {
    src << (warp_rows ? "    if (lane == 0) {\n" : "    if (threadIdx.x == 0) {\n");
    for (const auto& [idx, name] : row_stores) {
      const KernelArg& a = spec.args[idx];
      src << "      " << (a.optional ? "if (" + a.name + " != nullptr) " : "") << a.name
          << "[row] = hp::from_float<" << cuda_type(a.dtype) << ">(" << name << ");\n";
    }
    src << "    }\n";
  }
  if (total)
    src << "    hp_loss += " << total->loss << ";\n    hp_count += " << total->count << ";\n";
  src << "  }\n";
  if (total) {
    // The warps' totals in order, then the blocks' (the last block to finish), as the total
    // kernels do: the result does not depend on scheduling.
    const KernelArg& loss = spec.args[total->loss_param];
    const KernelArg& count = spec.args[total->count_param];
    const int slots = warp_rows ? warps : 1;
    src << "  // the loss over all rows\n";
    src << "  __shared__ float hp_tot[2][" << slots << "];\n";
    src << "  __shared__ float hp_tsmem[32];\n";
    src << "  __shared__ bool hp_last;\n";
    src << (warp_rows ? "  if (lane == 0) {\n    hp_tot[0][threadIdx.x >> 5] = hp_loss;\n"
                        "    hp_tot[1][threadIdx.x >> 5] = hp_count;\n  }\n"
                      : "  if (threadIdx.x == 0) {\n    hp_tot[0][0] = hp_loss;\n"
                        "    hp_tot[1][0] = hp_count;\n  }\n");
    src << "  __syncthreads();\n";
    src << "  if (threadIdx.x == 0) {\n";
    src << "    float hp_s0 = 0.0f, hp_s1 = 0.0f;\n";
    src << "    for (int w = 0; w < " << slots << "; ++w) {\n";
    src << "      hp_s0 += hp_tot[0][w];\n      hp_s1 += hp_tot[1][w];\n    }\n";
    src << "    partial[2 * blockIdx.x] = hp_s0;\n    partial[2 * blockIdx.x + 1] = hp_s1;\n";
    src << "    __threadfence();  // the partials are visible before the count says so\n";
    src << "    hp_last = atomicAdd(done, 1u) == kRowBlocks - 1;\n  }\n";
    src << "  __syncthreads();\n  if (!hp_last) return;\n";
    src << "  float hp_s0 = 0.0f, hp_s1 = 0.0f;\n";
    src << "  for (unsigned b = threadIdx.x; b < kRowBlocks; b += blockDim.x) {\n";
    src << "    hp_s0 += __ldcg(&partial[2 * b]);\n    hp_s1 += __ldcg(&partial[2 * b + 1]);\n  "
           "}\n";
    src << "  hp_s0 = hp::block_sum(hp_s0, hp_tsmem);\n  hp_s1 = hp::block_sum(hp_s1, hp_tsmem);\n";
    src << "  if (threadIdx.x == 0) {\n";
    src << "    " << (loss.optional ? "if (" + loss.name + " != nullptr) " : "") << loss.name
        << "[0] = hp::from_float<" << cuda_type(loss.dtype) << ">("
        << (total->mean ? "hp_s0 / hp_s1" : "hp_s0") << ");\n";
    src << "    " << (count.optional ? "if (" + count.name + " != nullptr) " : "") << count.name
        << "[0] = hp::from_float<" << cuda_type(count.dtype) << ">(hp_s1);\n";
    src << "    *done = 0u;  // for the next launch\n  }\n";
  }
  src << "}\n";
  name_kernel(spec, group.name, src.str());
  return spec;
}

}  // namespace hotpath::detail
