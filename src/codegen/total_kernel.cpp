// Total kernels: mse_loss reduced to one value (codegen/kernel.h). A fixed grid: each block sums
// its grid-stride share of (x - y)^2 in fp32 and writes the partial sum to the workspace; the
// last block to finish (a counter in the workspace) adds the partials in block order and stores
// the result, scaled for the mean. The order of every sum is fixed: the result does not depend on
// scheduling (ATen's reduction sums in another order; the difference is rounding).
#include <algorithm>
#include <sstream>

#include "codegen/kernel.h"
#include "common/error.h"
#include "common/hash.h"
#include "fusion/op_table.h"

namespace hotpath::detail {

namespace {
constexpr int kTotalBlock = 256;
constexpr std::int64_t kTotalPerBlock = 4096;  // elements per block, at least
constexpr int kMaxTotalBlocks = 256;
}  // namespace

KernelSpec generate_total_kernel(const Graph& g, const FusionGroup& group) {
  KernelSpec spec;
  spec.not_interpretable = "a reduction to one value";
  HOTPATH_CHECK(group.nodes.size() == 1, "a total kernel computes one op, not ",
                group.nodes.size());
  const Node& n = g.node(group.nodes.front());
  HOTPATH_CHECK(total_reduction_check(g, n).empty(), "node ", n.index, " (", n.short_name(),
                ") is not a reduction a total kernel computes: ", total_reduction_check(g, n));
  const TensorMeta& dom = group.domain;
  spec.numel = dom.numel();
  spec.index64 = spec.numel > (1LL << 31) - 1;
  spec.block = kTotalBlock;
  spec.fixed_blocks = static_cast<int>(std::clamp<std::int64_t>(
      (spec.numel + kTotalPerBlock - 1) / kTotalPerBlock, 1, kMaxTotalBlocks));
  spec.workspace_floats = spec.fixed_blocks + 1;  // the partials, then the counter
  spec.counters_at = spec.fixed_blocks;
  GroupParams params(g, group, spec);
  const std::size_t x = params.tensor(n.input_at(0));
  const std::size_t y = params.tensor(n.input_at(1));
  const std::size_t out = params.tensor(n.outputs[0]);
  spec.args[out].written = true;
  for (std::size_t i = 0; i < spec.args.size(); ++i) spec.args[i].name = "t" + std::to_string(i);
  const bool mean = n.args[2].toInt() == 1;
  const std::string scale = float_literal(mean ? 1.0 / static_cast<double>(spec.numel) : 1.0);

  std::ostringstream src;
  src << "// hotpath fused kernel: mse_loss (" << (mean ? "mean" : "sum") << ") over "
      << format_meta(dom) << ", reduced to one value\n";
  src << "#include \"hotpath_runtime.cuh\"\n\n";
  src << "typedef " << (spec.index64 ? "long long" : "int") << " idx_t;\n\n";
  src << kernel_signature(spec, ",\n    float* __restrict__ partial,\n    unsigned* done");
  src << "  __shared__ float smem[32];\n";
  src << "  __shared__ bool last;\n";
  src << "  float acc = 0.0f;\n";
  src << "  const idx_t stride = static_cast<idx_t>(gridDim.x) * blockDim.x;\n";
  src << "  for (idx_t i = static_cast<idx_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < kNumel;"
         " i += stride) {\n";
  src << "    const float d = hp::to_float(" << spec.args[x].name << "[i]) - hp::to_float("
      << spec.args[y].name << "[i]);\n";
  // As ATen's mse kernel: the square of the fp32 difference, stored (here: rounded) in the
  // operands' dtype, then summed in fp32.
  src << "    acc += " << round_to_dtype("d * d", spec.args[x].dtype) << ";\n  }\n";
  src << "  acc = hp::block_sum(acc, smem);\n";
  src << "  if (threadIdx.x == 0) {\n";
  src << "    partial[blockIdx.x] = acc;\n";
  src << "    __threadfence();  // the partial is visible before the count says so\n";
  src << "    last = atomicAdd(done, 1u) == gridDim.x - 1;\n";
  src << "  }\n";
  src << "  __syncthreads();\n";
  src << "  if (!last) return;\n";
  src << "  float total = 0.0f;\n";
  src << "  for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x) total += "
         "__ldcg(&partial[b]);\n";
  src << "  total = hp::block_sum(total, smem);\n";
  src << "  if (threadIdx.x == 0) {\n";
  src << "    " << spec.args[out].name << "[0] = hp::from_float<" << cuda_type(spec.args[out].dtype)
      << ">(total * " << scale << ");\n";
  src << "    *done = 0u;  // for the next launch\n";
  src << "  }\n}\n";
  name_kernel(spec, group.name, src.str());
  return spec;
}

}  // namespace hotpath::detail
