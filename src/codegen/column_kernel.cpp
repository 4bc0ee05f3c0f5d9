// Column kernels: fusion groups over a domain [..., C] that sum values over every dimension but the
// last (codegen/kernel.h): the leading dimensions are read as R rows, so operands must fold them
// into one stride (full tensors and per-column ones do; a group with any other is refused and
// stays eager). A block takes 32 columns at a time, one per lane, and walks all R rows (or,
// beyond kMaxColumnRows, a chunk of them) with its warps, computing the group's pointwise values
// per element, storing those that are needed and adding up the summed ones in fp32; the warps'
// partial sums then meet in shared memory and one warp stores each column's sum. Every column is
// summed by one block in a fixed order: the result does not depend on scheduling (ATen's reduction
// sums in another order; the difference is rounding).
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

// Rows summed by one thread in flight; columns per block (one per lane of a warp).
constexpr int kColumnUnroll = 4;
constexpr std::int64_t kMaxChunks = 64;  // chunks of rows per tile, for tall sums
constexpr int kTileColumns = 32;
constexpr int kMaxRowLanes = 16;  // warps per block
// At least this many rows and fewer tiles than kFewTiles: chunks of rows as well (see below).
constexpr std::int64_t kChunkedRows = 1024;
constexpr std::int64_t kFewTiles = 128;

std::string offset_expr(std::int64_t row_stride, std::int64_t col_stride) {
  std::string e;
  auto term = [&](const char* var, std::int64_t stride) {
    if (stride == 0) return;
    if (!e.empty()) e += " + ";
    e += stride == 1 ? std::string(var) : std::string(var) + " * " + std::to_string(stride);
  };
  term("r", row_stride);
  term("c", col_stride);
  return e.empty() ? "0" : e;
}

// The stride of row r when the domain's leading dimensions (all but the last) are read as one,
// from an operand's strides over the domain (domain_strides); nullopt where they do not fold:
// an operand broadcast over some leading dimensions but not others, or one whose leading strides
// are not nested (a transposed one).
std::optional<std::int64_t> row_stride(const std::vector<std::int64_t>& st,
                                       const std::vector<std::int64_t>& sizes) {
  std::optional<std::int64_t> unit;
  std::int64_t inner = 1;  // rows per step of dimension d
  for (std::size_t d = sizes.size() - 1; d-- > 0;) {
    if (sizes[d] == 1) continue;
    if (!unit) {
      unit = st[d];
    } else if (st[d] != *unit * inner) {
      return std::nullopt;
    }
    inner *= sizes[d];
  }
  return unit.value_or(0);
}

}  // namespace

KernelSpec generate_column_kernel(const Graph& g, const FusionGroup& group) {
  KernelSpec spec;
  spec.not_interpretable = "a sum over columns";
  const TensorMeta& dom = group.domain;
  HOTPATH_CHECK(dom.sizes.size() >= 2, "a column kernel needs a domain of rows and columns, not ",
                format_meta(dom));
  const std::vector<std::int64_t> dsizes(dom.sizes.begin(), dom.sizes.end());
  const std::int64_t cols = dsizes.back();
  HOTPATH_CHECK(cols > 0, "a column kernel over no columns: ", format_meta(dom));
  const std::int64_t rows = dom.numel() / cols;
  spec.numel = dom.numel();
  int lanes = 1;
  while (lanes < kMaxRowLanes && lanes < rows) lanes *= 2;
  spec.block = 32 * lanes;
  spec.col_tiles = (cols + kTileColumns - 1) / kTileColumns;
  GroupParams params(g, group, spec);

  std::ostringstream body;
  std::map<int, std::string> var;  // value id -> C++ name
  std::map<int, int> final_version;
  std::vector<std::pair<std::size_t, std::string>> loads;  // param, variable
  std::vector<std::string> scalar_params;
  struct Sum {
    std::string input;  // the summed per-element value
    std::size_t param;  // the output tensor
  };
  std::vector<Sum> sums;
  auto operand = [&](int v) -> std::string {
    if (const auto it = var.find(v); it != var.end()) return it->second;
    HOTPATH_CHECK(!params.in_group(v), "value %", v, " used before it is computed");
    const std::size_t p = params.tensor(v);
    const std::string name = "x" + std::to_string(loads.size());
    loads.emplace_back(p, name);
    var[v] = name;
    return name;
  };
  for (std::size_t mi = 0; mi < group.nodes.size(); ++mi) {
    const Node& n = g.node(group.nodes[mi]);
    const int out = n.outputs[0];
    if (is_column_sum(g, n)) {
      const std::string in = operand(n.input_at(0));
      const std::size_t p = params.tensor(out);
      spec.args[p].written = true;
      sums.push_back(Sum{in, p});
      continue;
    }
    const PointwiseOp* op = find_pointwise(n);
    HOTPATH_CHECK(op != nullptr, "node ", n.index, " (", n.short_name(), ") is not fusable");
    std::vector<std::string> t, s;
    for (int a : op->tensors) t.push_back(operand(n.input_at(a)));
    for (int a : op->scalars) {
      if (n.args[static_cast<std::size_t>(a)].isNone()) {
        s.emplace_back();
        continue;
      }
      const std::string name = "s" + std::to_string(scalar_params.size());
      params.scalar(static_cast<int>(mi), a, name);
      scalar_params.push_back(name);
      s.push_back(name);
    }
    const std::string expr = pointwise_expression(g, n, *op, t, s);
    const std::string name = "v" + std::to_string(mi);
    body << "        const float " << name << " = " << expr << ";  // " << n.short_name() << "\n";
    var[out] = name;
    const int target = op->writes >= 0 ? n.input_at(op->writes) : out;
    spec.args[params.tensor(target)].written = true;
    final_version[g.value(out).tensor] = out;
  }
  HOTPATH_CHECK(!sums.empty(), "a column kernel without a column sum");

  // Which tensors the kernel writes: a tensor the group made is optional unless the last member
  // returns it.
  bool use64 = false;
  std::vector<std::string> offsets(spec.args.size());
  std::vector<bool> per_column(spec.args.size(), false);  // the same for every row: loaded once
  for (std::size_t i = 0; i < spec.args.size(); ++i) {
    KernelArg& a = spec.args[i];
    if (a.kind != KernelArg::Kind::Tensor) continue;
    const TensorMeta& m = *params.meta_of_param.at(static_cast<int>(i));
    a.name = "t" + std::to_string(i);
    a.optional = a.written && a.output >= 0 && !made_by_last(g, group, params.tensor_of(i));
    const bool is_sum =
        std::any_of(sums.begin(), sums.end(), [&](const Sum& s) { return s.param == i; });
    a.single = !a.written && m.numel() == 1;
    if (is_sum) continue;  // one value per column, at c
    const std::vector<std::int64_t> st = domain_strides(m, dom);
    const std::optional<std::int64_t> rs = row_stride(st, dsizes);
    HOTPATH_CHECK(rs.has_value(), format_meta(m), " does not read the rows of ", format_meta(dom),
                  " with one stride");
    if (max_offset(m) > (1LL << 31) - 1) use64 = true;
    offsets[i] = offset_expr(*rs, st.back());
    per_column[i] = *rs == 0;
  }
  spec.index64 = use64 || spec.numel > (1LL << 31) - 1;

  std::ostringstream src;
  src << "// hotpath fused kernel: " << group.nodes.size() << " ops over " << format_meta(dom)
      << ", summed over rows\n//  ";
  for (int m : group.nodes) src << " " << g.node(m).short_name();
  src << "\n#include \"hotpath_runtime.cuh\"\n\n";
  src << "typedef " << (spec.index64 ? "long long" : "int") << " idx_t;\n\n";
  // Taller than kMaxColumnRows: each block takes a chunk of the rows of one tile, leaves its sums
  // in the workspace, and the tile's last chunk to finish adds them up in order. Also where the
  // tiles alone would leave most of the GPU idle: a Linear's bias gradient over B x T = 4096 rows
  // of 768 columns is 24 tiles, and 24 blocks walking 4096 rows each took 25% longer than ATen's
  // reduction on an H100.
  const bool chunked =
      rows > kMaxColumnRows || (rows >= kChunkedRows && spec.col_tiles < kFewTiles);
  const std::int64_t chunk_rows =
      std::max<std::int64_t>(lanes * 16, (rows + kMaxChunks - 1) / kMaxChunks);
  const std::int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  if (chunked) {
    HOTPATH_CHECK(spec.col_tiles * chunks < (1LL << 31), "too many blocks for ", format_meta(dom));
    spec.fixed_blocks = static_cast<int>(spec.col_tiles * chunks);
    spec.counters_at = static_cast<std::int64_t>(sums.size()) * chunks * cols;
    spec.workspace_floats = spec.counters_at + spec.col_tiles;
  }
  src << kernel_signature(
      spec, chunked ? ",\n    float* __restrict__ hp_ws,\n    unsigned* hp_done" : "");
  src << "  constexpr idx_t kRows = " << rows << ";\n";
  src << "  constexpr idx_t kCols = " << cols << ";\n";
  src << "  constexpr int kLanes = " << lanes << ";\n";
  src << "  __shared__ float partial[" << sums.size() << "][kLanes][" << kTileColumns + 1 << "];\n";
  src << "  const int lane = threadIdx.x & 31;\n";
  src << "  const int row_lane = threadIdx.x >> 5;\n";
  for (const auto& [p, name] : loads) {
    if (spec.args[p].single)
      src << "  const float " << name << " = hp::to_float(" << spec.args[p].name << "[0]);\n";
  }
  if (chunked) {
    src << "  constexpr idx_t kTiles = " << spec.col_tiles << ";\n";
    src << "  constexpr idx_t kChunkRows = " << chunk_rows << ";\n";
    src << "  constexpr unsigned kChunks = " << chunks << ";\n";
    src << "  __shared__ bool hp_last;\n";
    src << "  {\n    const idx_t tile = blockIdx.x % kTiles;\n";
    src << "    const unsigned chunk = blockIdx.x / kTiles;\n";
  } else {
    src << "  for (idx_t tile = blockIdx.x; tile < (kCols + " << kTileColumns - 1 << ") / "
        << kTileColumns << "; tile += gridDim.x) {\n";
  }
  src << "    const idx_t c = tile * " << kTileColumns << " + lane;\n";
  for (std::size_t k = 0; k < sums.size(); ++k) src << "    float acc" << k << " = 0.0f;\n";
  src << "    if (c < kCols) {\n";
  for (const auto& [p, name] : loads) {
    const KernelArg& a = spec.args[p];
    if (a.single || !per_column[p]) continue;
    src << "      const float " << name << " = hp::to_float(" << a.name << "[" << offsets[p]
        << "]);\n";
  }
  src << "#pragma unroll " << kColumnUnroll << "\n";
  if (chunked) {
    src << "      const idx_t end = min(static_cast<idx_t>(chunk + 1) * kChunkRows, kRows);\n";
    src << "      for (idx_t r = chunk * kChunkRows + row_lane; r < end; r += kLanes) {\n";
  } else {
    src << "      for (idx_t r = row_lane; r < kRows; r += kLanes) {\n";
  }
  for (const auto& [p, name] : loads) {
    const KernelArg& a = spec.args[p];
    if (a.single || per_column[p]) continue;
    src << "        const float " << name << " = hp::to_float(" << a.name << "[" << offsets[p]
        << "]);\n";
  }
  src << body.str();
  for (const auto& [tensor, value] : final_version) {
    const std::size_t p = static_cast<std::size_t>(params.param_of_tensor.at(tensor));
    const KernelArg& a = spec.args[p];
    src << "        " << (a.optional ? "if (" + a.name + " != nullptr) " : "") << a.name << "["
        << offsets[p] << "] = hp::from_float<" << cuda_type(a.dtype) << ">(" << var.at(value)
        << ");\n";
  }
  for (std::size_t k = 0; k < sums.size(); ++k)
    src << "        acc" << k << " += " << sums[k].input << ";\n";
  src << "      }\n    }\n";
  for (std::size_t k = 0; k < sums.size(); ++k)
    src << "    partial[" << k << "][row_lane][lane] = acc" << k << ";\n";
  if (chunked) {
    std::vector<std::string> stores;
    for (const Sum& sum : sums) stores.push_back(column_store(spec.args[sum.param]));
    src << chunked_sum_epilogue({"partial", "row_lane", "lane", "kLanes", "hp_ws", "hp_done"},
                                stores);
    src << "  }\n}\n";
  } else {
    src << "    __syncthreads();\n";
    src << "    if (row_lane == 0 && c < kCols) {\n";
    for (const Sum& sum : sums) {
      const std::size_t k = static_cast<std::size_t>(&sum - sums.data());
      src << "      {\n        float s = partial[" << k << "][0][lane];\n";
      src << "        for (int w = 1; w < kLanes; ++w) s += partial[" << k << "][w][lane];\n";
      src << "        " << column_store(spec.args[sum.param]) << "\n      }\n";
    }
    src << "    }\n    __syncthreads();  // partial is reused by the next tile\n  }\n}\n";
  }
  name_kernel(spec, group.name, src.str());
  return spec;
}

}  // namespace hotpath::detail
