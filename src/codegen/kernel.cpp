#include "codegen/kernel.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "codegen/interpreter.h"
#include "common/error.h"
#include "common/hash.h"
#include "fusion/op_table.h"

namespace hotpath::detail {

// hp::Program is passed by value as the interpreter's only kernel parameter.
static_assert(sizeof(hp::Program) <= 4096, "the interpreter's program exceeds a kernel parameter");

const char* cuda_type(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float:
      return "float";
    case c10::ScalarType::Half:
      return "hp::half";
    case c10::ScalarType::BFloat16:
      return "hp::bfloat16";
    case c10::ScalarType::Bool:
      return "bool";
    case c10::ScalarType::Long:
      return "long long";
    default:
      HOTPATH_FAIL("no CUDA storage type for ", c10::toString(t));
  }
}

// Strides of `m` seen over the domain's dimensions (0 where broadcast).
std::vector<std::int64_t> domain_strides(const TensorMeta& m, const TensorMeta& dom) {
  const std::size_t nd = dom.sizes.size();
  HOTPATH_CHECK(m.sizes.size() <= nd && m.strides.size() == m.sizes.size(),
                "operand rank exceeds the domain's: ", format_meta(m), " vs ", format_meta(dom));
  std::vector<std::int64_t> st(nd, 0);
  const std::size_t lead = nd - m.sizes.size();
  for (std::size_t d = 0; d < m.sizes.size(); ++d) {
    st[lead + d] = m.sizes[d] == 1 ? 0 : m.strides[d];
  }
  return st;
}

std::vector<std::int64_t> contiguous_strides(const std::vector<std::int64_t>& sizes) {
  std::vector<std::int64_t> st(sizes.size(), 0);
  std::int64_t s = 1;
  for (std::size_t d = sizes.size(); d-- > 0;) {
    st[d] = sizes[d] == 1 ? 0 : s;
    s *= sizes[d];
  }
  return st;
}

std::int64_t max_offset(const TensorMeta& m) {
  std::int64_t off = 0;
  for (std::size_t d = 0; d < m.sizes.size(); ++d) off += (m.sizes[d] - 1) * std::abs(m.strides[d]);
  return off;
}

std::string round_to_dtype(const std::string& expr, c10::ScalarType dtype) {
  return dtype == c10::ScalarType::Float
             ? expr
             : std::string("hp::round_to<") + cuda_type(dtype) + ">(" + expr + ")";
}

std::string op_result(const std::string& expr, c10::ScalarType dtype) {
  return dtype == c10::ScalarType::Float ? "hp::round_to<float>(" + expr + ")"
                                         : round_to_dtype(expr, dtype);
}

std::string chunked_sum_epilogue(const ChunkedSumNames& v, const std::vector<std::string>& stores) {
  std::ostringstream src;
  // The warps' sums of sum k, in warp order, then `then` (a statement with the total in s).
  auto warp_sums = [&](const std::string& then) {
    src << "    if (" << v.warp << " == 0 && c < kCols) {\n";
    for (std::size_t k = 0; k < stores.size(); ++k) {
      src << "      {\n        float s = " << v.smem << "[" << k << "][0][" << v.lane << "];\n";
      src << "        for (int w = 1; w < " << v.warps << "; ++w) s += " << v.smem << "[" << k
          << "][w][" << v.lane << "];\n";
      src << "        "
          << (then.empty()
                  ? v.ws + "[(" + std::to_string(k) + " * kChunks + chunk) * kCols + c] = s;"
                  : stores[k])
          << "\n      }\n";
    }
  };
  src << "    __syncthreads();\n";
  warp_sums("");
  src << "      __threadfence();  // the partials are visible before the count says so\n";
  src << "    }\n    __syncthreads();\n";
  src << "    if (threadIdx.x == 0) hp_last = atomicAdd(&" << v.done
      << "[tile], 1u) == kChunks - 1;\n";
  src << "    __syncthreads();\n";
  src << "    if (!hp_last) return;\n";
  src << "    // The tile's last chunk: every warp adds up its chunks, then the warps in order.\n";
  for (std::size_t k = 0; k < stores.size(); ++k) {
    src << "    {\n      float s = 0.0f;\n";
    src << "      if (c < kCols)\n        for (unsigned ch = " << v.warp
        << "; ch < kChunks; ch += " << v.warps << ") s += __ldcg(&" << v.ws << "[(" << k
        << " * kChunks + ch) * kCols + c]);\n";
    src << "      " << v.smem << "[" << k << "][" << v.warp << "][" << v.lane << "] = s;\n    }\n";
  }
  src << "    __syncthreads();\n";
  warp_sums("store");
  src << "    }\n";
  src << "    if (threadIdx.x == 0) " << v.done << "[tile] = 0u;  // for the next launch\n";
  return src.str();
}

std::string column_store(const KernelArg& a) {
  return (a.optional ? "if (" + a.name + " != nullptr) " : std::string()) + a.name +
         "[c] = hp::from_float<" + cuda_type(a.dtype) + ">(s);";
}

bool made_by_last(const Graph& g, const FusionGroup& group, int tensor) {
  for (int v : g.node(group.nodes.back()).outputs)
    if (g.value(v).tensor == tensor) return true;
  return false;
}

std::string pointwise_expression(const Graph& g, const Node& n, const PointwiseOp& op,
                                 const std::vector<std::string>& t,
                                 const std::vector<std::string>& s) {
  std::vector<std::string> imm;
  if (op.immediates)
    for (double v : op.immediates(n, g)) imm.push_back(float_literal(v));
  std::vector<std::string> operands = t;
  const auto round = operand_rounding(g, n, op);
  for (std::size_t k = 0; k < operands.size() && k < round.size(); ++k)
    operands[k] = round_to_dtype(operands[k], round[k]);
  return op_result(op.emit(operands, s, imm, op.variant ? op.variant(n, g) : std::string()),
                   g.value(n.outputs[0]).meta.dtype);
}

namespace {

// The declaration of a kernel argument, without qualifiers for a struct field.
std::string arg_declaration(const KernelArg& a, bool field) {
  if (a.kind == KernelArg::Kind::Scalar) return (field ? "float " : "const float ") + a.name;
  return std::string(a.written ? "" : "const ") + cuda_type(a.dtype) +
         (field ? "* " : "* __restrict__ ") + a.name;
}

}  // namespace

std::string parameter_list(const KernelSpec& spec, const std::string& extra) {
  std::ostringstream src;
  src << "(";
  for (const KernelArg& a : spec.args) src << "\n    " << arg_declaration(a, false) << ",";
  src << "\n    const idx_t kNumel,\n    const int vector_ok" << extra << ") {\n";
  return src.str();
}

std::string kernel_signature(const KernelSpec& spec, const std::string& extra) {
  return std::string("extern \"C\" __global__ void __launch_bounds__(") +
         std::to_string(spec.block) + ") " + kKernelName + parameter_list(spec, extra);
}

std::size_t multi_segment_bytes(const KernelSpec& spec) { return 8 * (spec.args.size() + 4); }

std::string multi_entry(const KernelSpec& spec) {
  std::ostringstream src;
  src << "// Launches of this kernel on different tensors in one (an optimizer's update of each\n"
      << "// parameter): segment k runs blocks [first_block, first_block + blocks) of the grid.\n";
  src << "struct Segment {\n";
  for (const KernelArg& a : spec.args) src << "  alignas(8) " << arg_declaration(a, true) << ";\n";
  src << "  alignas(8) idx_t numel;\n  alignas(8) int vector_ok;\n"
      << "  alignas(8) unsigned first_block;\n  alignas(8) unsigned blocks;\n};\n";
  src << "struct Segments {\n  Segment s[" << spec.multi_segments
      << "];\n  alignas(8) int count;\n};\n\n";
  src << "extern \"C\" __global__ void __launch_bounds__(" << spec.block << ") " << kKernelName
      << "_multi(const Segments m) {\n";
  src << "  int k = 0;\n";
  src << "  while (k + 1 < m.count && blockIdx.x >= m.s[k + 1].first_block) ++k;\n";
  src << "  const Segment& s = m.s[k];\n  run(";
  for (const KernelArg& a : spec.args) src << "s." << a.name << ", ";
  src << "s.numel, s.vector_ok, blockIdx.x - s.first_block, s.blocks);\n}\n";
  return src.str();
}

void name_kernel(KernelSpec& spec, const std::string& group_name, std::string source) {
  spec.name = "hp_" + group_name + "_" + short_hex(hash_string(source));
  const std::string placeholder = kKernelName;
  for (std::size_t at = source.find(placeholder); at != std::string::npos;
       at = source.find(placeholder))
    source.replace(at, placeholder.size(), spec.name);
  spec.source = std::move(source);
}

GroupParams::GroupParams(const Graph& graph, const FusionGroup& grp, KernelSpec& s)
    : g(graph), group(grp), spec(s) {
  for (std::size_t i = 0; i < group.nodes.size(); ++i)
    member_of[group.nodes[i]] = static_cast<int>(i);
}

bool GroupParams::in_group(int value) const {
  const int p = g.value(value).producer;
  return p >= 0 && member_of.count(p) > 0;
}

int GroupParams::tensor_of(std::size_t param) const {
  for (const auto& [t, p] : param_of_tensor)
    if (static_cast<std::size_t>(p) == param) return t;
  return -1;
}

std::size_t GroupParams::tensor(int value) {
  const Value& v = g.value(value);
  // A kernel indexes a tensor by one layout: its versions share it (Graph::from_trace).
  HOTPATH_CHECK(same_layout(v.meta, g.value(v.tensor).meta), "value %", value, " (",
                format_meta(v.meta), ") is a version of %", v.tensor, " (",
                format_meta(g.value(v.tensor).meta), ") with another layout");
  auto it = param_of_tensor.find(v.tensor);
  if (it == param_of_tensor.end()) {
    KernelArg a;
    a.kind = KernelArg::Kind::Tensor;
    const Value& base = g.value(v.tensor);
    if (base.producer >= 0 && member_of.count(base.producer)) {
      a.member = member_of.at(base.producer);
      a.output = base.output;
    } else {
      // Found through the first member that touches it.
      for (std::size_t i = 0; i < group.nodes.size() && a.member < 0; ++i) {
        const Node& n = g.node(group.nodes[i]);
        for (std::size_t k = 0; k < n.inputs.size(); ++k) {
          const NodeInput& in = n.inputs[k];
          if (in.value >= 0 && g.value(in.value).tensor == v.tensor) {
            a.member = static_cast<int>(i);
            a.argument = in.argument;
            if (is_sink(n)) a.element = static_cast<int>(k);  // its inputs are one list's
            break;
          }
        }
      }
    }
    a.dtype = base.meta.dtype;
    it = param_of_tensor.emplace(v.tensor, static_cast<int>(spec.args.size())).first;
    meta_of_param[it->second] = &base.meta;
    spec.args.push_back(a);
  }
  return static_cast<std::size_t>(it->second);
}

std::size_t GroupParams::scalar(int member, int argument, const std::string& name) {
  KernelArg sa;
  sa.kind = KernelArg::Kind::Scalar;
  sa.member = member;
  sa.argument = argument;
  sa.name = name;
  spec.args.push_back(sa);
  return spec.args.size() - 1;
}

namespace {

std::int64_t grid_stride_blocks(std::int64_t wanted, int sm_count) {
  return std::max<std::int64_t>(1, std::min<std::int64_t>(wanted, std::int64_t{sm_count} * 16));
}

}  // namespace

std::int64_t launch_blocks(const KernelSpec& spec, int sm_count) {
  if (spec.fixed_blocks > 0) return spec.fixed_blocks;
  if (spec.rows > 0)
    return grid_stride_blocks((spec.rows + spec.rows_per_block - 1) / spec.rows_per_block,
                              sm_count);
  if (spec.col_tiles > 0) return grid_stride_blocks(spec.col_tiles, sm_count);
  const std::int64_t per_block = std::int64_t{spec.block} * spec.vec;
  return grid_stride_blocks((spec.numel + per_block - 1) / per_block, sm_count);
}

std::int64_t interpreter_blocks(std::int64_t numel, int sm_count) {
  const std::int64_t per_block = std::int64_t{kInterpreterBlock} * kInterpreterElements;
  return grid_stride_blocks((numel + per_block - 1) / per_block, sm_count);
}

KernelSpec generate_kernel(const Graph& g, const FusionGroup& group, bool multi) {
  switch (group.kind) {
    case GroupKind::Rows:
      return generate_row_kernel(g, group);
    case GroupKind::Columns:
      return generate_column_kernel(g, group);
    case GroupKind::Total:
      return generate_total_kernel(g, group);
    case GroupKind::Pointwise:
      break;
  }
  return generate_pointwise_kernel(g, group, multi);
}

}  // namespace hotpath::detail
