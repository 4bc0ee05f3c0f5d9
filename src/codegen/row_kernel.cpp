// Row kernels, first step: each member of the group becomes named values and reductions
// (codegen/row_kernel.h).
#include "codegen/row_kernel.h"

#include <algorithm>

#include "common/error.h"

namespace hotpath::detail {
namespace {

std::vector<std::int64_t> sizes_of(const TensorMeta& m, std::size_t rank) {
  std::vector<std::int64_t> s(rank - std::min(rank, m.sizes.size()), 1);
  s.insert(s.end(), m.sizes.begin(), m.sizes.end());
  return s;
}

constexpr std::int64_t kWarpCols = 1024;

}  // namespace

KernelSpec generate_row_kernel(const Graph& g, const FusionGroup& group) {
  return RowKernelGenerator(g, group).generate();
}

RowKernelGenerator::RowKernelGenerator(const Graph& graph, const FusionGroup& fusion_group)
    : g(graph),
      group(fusion_group),
      dom(group.domain),
      rank(dom.sizes.size()),
      cols(rank > 0 ? dom.sizes.back() : 0),
      dsizes(dom.sizes.begin(), dom.sizes.end()),
      params(graph, fusion_group, spec) {
  spec.not_interpretable = "a reduction along rows";
  HOTPATH_CHECK(!dom.sizes.empty(), "a row kernel needs at least one dimension");
  row_sizes = dsizes;
  row_sizes.back() = 1;
  full_strides = contiguous_strides(dsizes);
  row_strides = contiguous_strides(row_sizes);
  std::vector<std::int64_t> col_sizes(rank, 1);
  col_sizes.back() = cols;
  col_strides = contiguous_strides(col_sizes);
  spec.numel = dom.numel();
  spec.rows = cols > 0 ? spec.numel / cols : 0;
  warp_rows = cols <= kWarpCols;
  spec.block = 32;
  while (spec.block < 256 && (warp_rows || spec.block < cols)) spec.block *= 2;
  spec.rows_per_block = warp_rows ? spec.block / 32 : 1;
}

void RowKernelGenerator::define() {
  for (std::size_t mi = 0; mi < group.nodes.size(); ++mi) {
    const Node& n = g.node(group.nodes[mi]);
    const int out = n.outputs[0];
    const std::string name = "v" + std::to_string(mi);
    int written = -1;  // value whose tensor receives the result
    if (const RowOp* r = find_row_op(n)) {
      Def d;
      d.name = name;
      if (!define_row_op(n, *r, name, d)) continue;
      d.expr = op_result(d.expr, g.value(out).meta.dtype);
      var[out] = add(d);
      written = out;
    } else {
      written = define_pointwise(n, mi, name);
    }
    KernelArg& p = spec.args[params.tensor(written)];
    p.written = true;
    final_version[g.value(out).tensor] = out;
  }
  collect_stores();
}

const std::string& RowKernelGenerator::add(Def d) {
  for (const std::string& dep : d.deps) {
    const Def& x = defs[def_of.at(dep)];
    d.level = std::max(d.level, x.level);
  }
  def_of[d.name] = defs.size();
  defs.push_back(std::move(d));
  return defs.back().name;
}

std::string RowKernelGenerator::reduce(const std::string& input, bool max) {
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
}

// A 1-D tensor from outside with one value per row (nll's targets, its unreduced gradient): fp32
// as every value; an int64 class index converts exactly (below kMaxClasses).
std::string RowKernelGenerator::row_operand(int v) {
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
}

std::string RowKernelGenerator::operand(int v) {
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
}

bool RowKernelGenerator::define_row_op(const Node& n, const RowOp& r, const std::string& name,
                                       Def& d) {
  std::vector<std::string> t;
  if (r.kind != RowOp::Kind::NllLossBackward)  // reads nothing of `self` but its shape
    for (int a : r.tensors) t.push_back(operand(n.input_at(a)));
  using K = RowOp::Kind;
  switch (r.kind) {
    case K::Sum:
    case K::Mean: {
      const std::string s = reduce(t[0], false);
      d.row = true;
      d.expr = r.kind == K::Sum ? s : "(" + s + " / " + float_literal(double(cols)) + ")";
      d.deps = {s};
      return true;
    }
    case K::Softmax:
    case K::LogSoftmax:
      define_softmax(r, t, name, d);
      return true;
    case K::SoftmaxBackward: {  // (grad_output, output): output * (grad_output - sum(g*o))
      Def p;
      p.name = name + "_prod";
      p.expr = "(" + t[0] + " * " + t[1] + ")";
      p.deps = {t[0], t[1]};
      const std::string s = reduce(add(p), false);
      d.expr = "(" + t[1] + " * (" + t[0] + " - " + s + "))";
      d.deps = {t[0], t[1], s};
      return true;
    }
    case K::LogSoftmaxBackward: {  // grad_output - exp(output) * sum(grad_output)
      const std::string s = reduce(t[0], false);
      d.expr = "(" + t[0] + " - expf(" + t[1] + ") * " + s + ")";
      d.deps = {t[0], t[1], s};
      return true;
    }
    case K::LayerNorm:
      define_layer_norm(n, t, name, d);
      return true;
    case K::RmsNorm:
      define_rms_norm(n, t, name, d);
      return true;
    case K::NllLoss:
      define_nll_loss(n, t, name);
      return false;  // its outputs are stored at the end of the kernel, not per row
    case K::NllLossBackward:
      define_nll_loss_backward(n, name, d);
      return true;
    case K::LayerNormBackward:
    case K::RmsNormBackward:
      return define_norm_backward(n, r, t, name, d);
  }
  HOTPATH_CHECK(false, "row op ", n.short_name(), " has no generator");
  return false;
}

void RowKernelGenerator::define_softmax(const RowOp& r, const std::vector<std::string>& t,
                                        const std::string& name, Def& d) {
  const std::string m = reduce(t[0], true);
  Def e;
  e.name = name + "_exp";
  e.expr = "expf(" + t[0] + " - " + m + ")";
  e.deps = {t[0], m};
  const std::string s = reduce(add(e), false);
  d.expr = r.kind == RowOp::Kind::Softmax ? "(" + e.name + " / " + s + ")"
                                          : "(" + t[0] + " - " + m + " - logf(" + s + "))";
  d.deps = {t[0], e.name, m, s};
}

void RowKernelGenerator::row_output(int v, const std::string& name, const std::string& from) {
  Def o;
  o.name = name;
  o.row = true;
  o.expr = round_to_dtype(from, g.value(v).meta.dtype);
  o.deps = {from};
  var[v] = add(o);
  spec.args[params.tensor(v)].written = true;
  final_version[g.value(v).tensor] = v;
}

// A row's mean of x and sum of squares about it (x - mean, named name_centered), as a norm's
// statistics; ATen's kernels take the biased variance from them.
RowKernelGenerator::Moments RowKernelGenerator::moments(const std::string& x,
                                                        const std::string& name) {
  Moments m;
  Def mean;
  mean.name = name + "_mean";
  mean.row = true;
  const std::string s1 = reduce(x, false);
  mean.expr = "(" + s1 + " / " + float_literal(double(cols)) + ")";
  mean.deps = {s1};
  m.mean = add(mean);
  Def centered;
  centered.name = name + "_centered";
  centered.expr = "(" + x + " - " + m.mean + ")";
  centered.deps = {x, m.mean};
  m.centered = add(centered);
  Def square;
  square.name = name + "_square";
  square.expr = "(" + m.centered + " * " + m.centered + ")";
  square.deps = {m.centered};
  m.squares = reduce(add(square), false);
  return m;
}

void RowKernelGenerator::define_layer_norm(const Node& n, const std::vector<std::string>& t,
                                           const std::string& name, Def& d) {
  // mean = sum(x) / C; rstd = rsqrt(sum((x - mean)^2) / C + eps) (the biased variance, as ATen;
  // rsqrtf as its CUDA kernel); out = (x - mean) * rstd * weight + bias.
  const std::string c = float_literal(double(cols));
  const Moments mo = moments(t[0], name);
  const std::string& s2 = mo.squares;
  Def rstd;
  rstd.name = name + "_rstd";
  rstd.row = true;
  rstd.expr = "rsqrtf(" + s2 + " / " + c + " + " + float_literal(n.args[4].toDouble()) + ")";
  rstd.deps = {s2};
  add(rstd);
  d.expr = "(" + mo.centered + " * " + rstd.name + ")";
  d.deps = {mo.centered, rstd.name};
  for (int a : {2, 3}) {
    if (n.input_at(a) < 0) continue;
    const std::string w = operand(n.input_at(a));
    d.expr = a == 2 ? "(" + d.expr + " * " + w + ")" : "(" + d.expr + " + " + w + ")";
    d.deps.push_back(w);
  }
  // Outputs 1 and 2: the mean and rstd, one per row, in their own dtype.
  row_output(n.outputs[1], name + "_out1", mo.mean);
  row_output(n.outputs[2], name + "_out2", rstd.name);
}

void RowKernelGenerator::define_rms_norm(const Node& n, const std::vector<std::string>& t,
                                         const std::string& name, Def& d) {
  // out = x * rstd * weight, as ATen's fused rms_norm. Its CUDA kernel
  // (aten/src/ATen/native/cuda/layer_norm_kernel.cu) computes rstd on one of two paths, which
  // agree on finite rows up to rounding but not where a row holds an infinity:
  // - rows of a multiple of 4 elements (at most 2^24) whose input and weight are aligned to 4
  //   elements take a vectorized kernel: rsqrt(sum(x^2) / C + eps); an infinity gives rstd 0;
  // - the rest a Welford kernel: rsqrt(var + mean^2 + eps) of x; an infinity makes the mean and
  //   then rstd NaN (the whole row NaN).
  // The kernel takes eager's path. For the vectorized one, an operand read from memory that ATen
  // would read in place (contiguous) must be aligned at launch, else the group runs eagerly.
  // Which path is a question of the row length alone: asked of the input as if read in place.
  const bool vectorized =
      rms_norm_vector_align(g.value(n.input_at(0)).meta.dtype, cols, /*dense=*/true) > 0;
  const std::string c = float_literal(double(cols));
  const std::string eps = float_literal(n.args[3].toDouble());
  Def rstd;
  rstd.name = name + "_rstd";
  rstd.row = true;
  if (vectorized) {
    Def square;
    square.name = name + "_square";
    square.expr = "(" + t[0] + " * " + t[0] + ")";
    square.deps = {t[0]};
    const std::string s2 = reduce(add(square), false);
    rstd.expr = "rsqrtf(" + s2 + " / " + c + " + " + eps + ")";
    rstd.deps = {s2};
  } else {
    const Moments mo = moments(t[0], name);
    rstd.expr =
        "rsqrtf(" + mo.squares + " / " + c + " + " + mo.mean + " * " + mo.mean + " + " + eps + ")";
    rstd.deps = {mo.squares, mo.mean};
  }
  add(rstd);
  d.expr = "(" + t[0] + " * " + rstd.name + ")";
  d.deps = {t[0], rstd.name};
  if (n.input_at(2) >= 0) {
    const std::string w = operand(n.input_at(2));
    d.expr = "(" + d.expr + " * " + w + ")";
    d.deps.push_back(w);
  }
  row_output(n.outputs[1], name + "_out1", rstd.name);
  for (int a : {0, 2}) {
    const int v = n.input_at(a);
    if (!vectorized || v < 0 || params.in_group(v)) continue;  // made here: eager's is new
    const TensorMeta& m = g.value(v).meta;
    // Not dense: ATen reads a contiguous copy (a new tensor) and any address is alike.
    KernelArg& arg = spec.args[params.tensor(v)];
    arg.align_bytes = std::max(arg.align_bytes, rms_norm_vector_align(m.dtype, cols, dense(m)));
  }
}

int rms_norm_vector_align(c10::ScalarType dtype, std::int64_t cols, bool dense) {
  if (cols % 4 != 0 || cols > (std::int64_t{1} << 24) || !dense) return 0;
  return 4 * static_cast<int>(c10::elementSize(dtype));
}

void RowKernelGenerator::define_nll_loss(const Node& n, const std::vector<std::string>& t,
                                         const std::string& name) {
  // Per row: minus the score at the target column (0 when it is ignore_index), and whether it
  // counts; ATen's total_weight is the count (no class weights).
  const std::string target = row_operand(n.input_at(1));
  const std::string kept = "(" + target + " != " + float_literal(double(n.args[4].toInt())) + ")";
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
}

void RowKernelGenerator::define_nll_loss_backward(const Node& n, const std::string& name, Def& d) {
  // As ATen's kernels: -(grad / total_weight) (mean), -grad (sum) or -grad[row] (none) at the
  // row's target column unless it is ignore_index; 0 elsewhere.
  const std::int64_t reduction = n.args[4].toInt();
  const std::string target = row_operand(n.input_at(2));
  const std::string grad = reduction == 0 ? row_operand(n.input_at(0)) : operand(n.input_at(0));
  Def value;
  value.name = name + "_value";
  value.row = true;
  if (reduction == 1) {
    const std::string total_weight = operand(n.input_at(6));
    value.expr = "(-(" + grad + " / " + total_weight + "))";
    value.deps = {grad, total_weight};
  } else {
    value.expr = "(-" + grad + ")";
    value.deps = {grad};
  }
  add(value);
  d.expr = "((static_cast<float>(c) == " + target + " && " + target +
           " != " + float_literal(double(n.args[5].toInt())) + ") ? " + value.name + " : 0.0f)";
  d.deps = {target, value.name};
}

bool RowKernelGenerator::define_norm_backward(const Node& n, const RowOp& r,
                                              const std::vector<std::string>& t,
                                              const std::string& name, Def& d) {
  // As ATen's kernels (layer_norm_kernel.cu): with xhat = (x - mean) * rstd (no mean for rms)
  // and gw = grad_out * weight, grad_input = (C * gw - xhat * sum(gw * xhat) - sum(gw)) * rstd /
  // C (no sum(gw) for rms); grad_weight sums grad_out * xhat over all rows, grad_bias sums
  // grad_out.
  const RowOp::NormBackwardArgs a = r.norm_args();
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
  // The input needs no gradient (output_mask[0] false: a norm on the model's input): only the
  // column blocks have work.
  if (!g.value(n.outputs[0]).meta.defined) return false;
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
  std::string e =
      "(" + float_literal(double(cols)) + " * " + gw.name + " - " + xhat.name + " * " + s2 + ")";
  d.deps = {gw.name, xhat.name, s2, rstd};
  if (a.mean >= 0) {
    const std::string s1 = reduce(gw.name, false);
    e = "(" + e + " - " + s1 + ")";
    d.deps.push_back(s1);
  }
  d.expr = "(" + e + " * (" + rstd + " * " + float_literal(1.0 / double(cols)) + "))";
  return true;
}

int RowKernelGenerator::define_pointwise(const Node& n, std::size_t member,
                                         const std::string& name) {
  const int out = n.outputs[0];
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
    params.scalar(static_cast<int>(member), a, sname);
    s.push_back(sname);
  }
  d.expr = pointwise_expression(g, n, *op, t, s);
  // One value per row (a norm's epsilon and rsqrt): computed once per row, from row values. Rows
  // of one element ([..., 1]) have values of that shape per element too: a value is a row's only
  // when all it is made of is.
  d.row = sizes_of(g.value(out).meta, rank) == row_sizes &&
          std::all_of(d.deps.begin(), d.deps.end(),
                      [&](const std::string& dep) { return defs[def_of.at(dep)].row; });
  HOTPATH_CHECK(d.row || sizes_of(g.value(out).meta, rank) == dsizes || cols == 1, n.short_name(),
                " makes one value per row from a value per element");
  var[out] = add(d);
  return op->writes >= 0 ? n.input_at(op->writes) : out;
}

void RowKernelGenerator::collect_stores() {
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
}

}  // namespace hotpath::detail
