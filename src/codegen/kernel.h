// Fusion group -> CUDA C++ source. Pure string generation: no CUDA headers, testable without a
// GPU. Strides of broadcast/strided operands are compile-time constants (the signature guarantees
// them); the element count and the scalars are kernel parameters (scalars change between
// iterations: learning-rate schedules, bias corrections), so that same-shaped work of different
// sizes shares one kernel.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fusion/op_table.h"
#include "fusion/partition.h"
#include "ir/graph.h"
#include "runtime/program.cuh"

namespace hotpath::detail {

// One kernel parameter and where the executor finds its value at run time.
struct KernelArg {
  enum class Kind { Tensor, Scalar };
  Kind kind = Kind::Tensor;
  int member = -1;    // position in the group's node list
  int argument = -1;  // schema argument of that member (tensor operand or scalar)
  int output = -1;    // Tensor made by the group: output index of `member` (argument is -1)
  int element = -1;   // Tensor from outside in a list argument (a stack's input): its position
  bool written = false;
  // A tensor the group makes that nobody but hotpath may hold at launch: the executor passes
  // nullptr then and the kernel skips its stores.
  bool optional = false;
  bool linear = false;  // its element offset is the linear index (vector path)
  bool single = false;  // one element, broadcast to the whole domain
  // The kernel follows the path eager's kernel takes for data at a multiple of this many bytes
  // (0: any): at another address the executor runs the group eagerly (see define_rms_norm).
  int align_bytes = 0;
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::string name;
};

struct KernelSpec {
  std::string name;    // function name in the source
  std::string source;  // includes "hotpath_runtime.cuh"
  std::vector<KernelArg> args;
  std::int64_t numel = 0;  // passed as the kernel's kNumel (idx_t), after the args
  bool index64 = false;    // idx_t is long long (else int)
  int vec = 1;             // elements per vector in the vector path (1: no vector path)
  int vec_bytes = 0;       // alignment the vector path needs of every linear tensor
  int block = 256;
  std::int64_t rows = 0;  // a row kernel: rows_per_block rows per block (grid-stride over rows)
  int rows_per_block = 1;
  // A column kernel: tiles of 32 columns (grid-stride over tiles; taller than kMaxColumnRows,
  // chunks of rows per tile on a fixed grid).
  std::int64_t col_tiles = 0;
  // A pointwise kernel can have an entry that runs several launches' work in one (`multi_name`:
  // its one parameter holds up to `multi_segments` segments; see multi_segment_bytes). Empty:
  // it has none (generated only for groups that launch together).
  std::string multi_name;
  int multi_segments = 0;
  // Kernels that sum across blocks (a total kernel, a norm backward's weight gradient, nll_loss's
  // loss, a tall column sum) launch with exactly `fixed_blocks` blocks (0: launch_blocks chooses
  // the grid) and get a workspace of `workspace_floats` floats, zeroed once, that the executor
  // keeps per group and passes after vector_ok: partial sums, then counters (from float
  // `counters_at` on) that the last block of each sum resets to 0.
  int fixed_blocks = 0;
  std::int64_t workspace_floats = 0;
  std::int64_t counters_at = 0;
  // The group as bytecode for the interpreter kernel (codegen/interpreter.h), which runs it
  // while this kernel compiles. Pointers and scalar values are filled in at each launch; slot k
  // is args[k]. Empty `interpretable` when it cannot: why not.
  hp::Program program{};
  std::string not_interpretable;
  bool interpretable() const { return not_interpretable.empty(); }
};

// The in-memory headers the generated source includes (name, contents).
const std::vector<std::pair<std::string, std::string>>& runtime_headers();

// `multi`: a pointwise kernel also gets its multi entry (KernelSpec::multi_name), for a batch
// of groups that launch together; multi_segments is set either way (0: it cannot have one).
KernelSpec generate_kernel(const Graph& g, const FusionGroup& group, bool multi = false);
// The kernel's grid for a launch on a device with `sm_count` SMs: the fixed grid its workspace is
// laid out for (fixed_blocks), else one block per rows_per_block rows (row kernels), per column
// tile (column kernels) or per block x vec elements, grid-stride beyond 16 blocks per SM.
std::int64_t launch_blocks(const KernelSpec& spec, int sm_count);
// The pointwise case of generate_kernel (GroupKind::Pointwise).
KernelSpec generate_pointwise_kernel(const Graph& g, const FusionGroup& group, bool multi);
// A group that reduces along the last dimension (FusionGroup::rows): one row per block, each
// reduction a block-wide sum or max, the pointwise ops around them recomputed per pass over the
// row. KernelSpec::rows is set; it has no interpreter program. A norm backward's weight and bias
// gradients (sums over all rows) are computed by blocks of a second kind that follow the row
// blocks: each sums a chunk of rows for 32 columns into the workspace, and the last chunk of a
// column tile to finish adds the chunks up in order (deterministic); fixed_blocks is set then.
KernelSpec generate_row_kernel(const Graph& g, const FusionGroup& group);
// ATen's CUDA rms_norm (aten::_fused_rms_norm) takes its vectorized path, whose rstd differs from
// its Welford path's where a row holds an infinity (define_rms_norm), for rows of `cols` elements
// read in place (`dense`) at addresses aligned to the bytes this returns; 0 where it never does
// (it then takes the Welford path wherever the data lies).
int rms_norm_vector_align(c10::ScalarType dtype, std::int64_t cols, bool dense);
// A group that sums over every dimension but the last (FusionGroup::columns; the leading
// dimensions read as rows, operands folding them into one stride): blocks of
// 32 columns walk every row, storing the pointwise values that are needed and adding up the
// summed ones. KernelSpec::col_tiles is set; it has no interpreter program.
KernelSpec generate_column_kernel(const Graph& g, const FusionGroup& group);
// mse_loss reduced to one value (FusionGroup::total): every block sums its share of the squared
// differences, the last block to finish adds up the partial sums in block order (deterministic)
// and stores the mean or sum. KernelSpec::fixed_blocks is set; it has no interpreter program.
KernelSpec generate_total_kernel(const Graph& g, const FusionGroup& group);

// Strides of `m` over the dimensions of the domain `dom` (0 where broadcast or of size 1), and
// the strides of a dense row-major tensor of `sizes` (0 for dimensions of size 1): how the
// generators decide how an operand is indexed.
std::vector<std::int64_t> domain_strides(const TensorMeta& m, const TensorMeta& dom);
std::vector<std::int64_t> contiguous_strides(const std::vector<std::int64_t>& sizes);

// Shared by the generators: the kernel's declaration line (its name is kKernelName until
// name_kernel replaces it with "hp_<group>_<hash of the source>") and the naming itself.
constexpr const char* kKernelName = "@KERNEL_NAME@";
std::string kernel_signature(const KernelSpec& spec, const std::string& extra = "");
// Its parameter list alone: "(args..., const idx_t kNumel, const int vector_ok" + `extra`, one
// parameter per line (a device function that the entries call takes the same).
std::string parameter_list(const KernelSpec& spec, const std::string& extra);

// Segments of one launch of a pointwise kernel's multi entry, at most.
constexpr int kMaxSegments = 16;
// A segment of the multi entry's parameter: 8 bytes per field, in order: the kernel's arguments
// (pointers; floats in the first 4 bytes), the element count (idx_t), vector_ok (int), the first
// block and the block count (unsigned). The parameter holds multi_segments of them, then the
// segment count (int).
std::size_t multi_segment_bytes(const KernelSpec& spec);
// A pointwise kernel's multi entry: a __global__ that runs the kernel's `run` device function
// for each segment of its one parameter.
std::string multi_entry(const KernelSpec& spec);
void name_kernel(KernelSpec& spec, const std::string& group_name, std::string source);

// Kernel parameters of a group's tensors: one per tensor (all versions of a tensor share its
// memory), found through the member that makes it or the first member that reads it.
struct GroupParams {
  GroupParams(const Graph& g, const FusionGroup& group, KernelSpec& spec);
  bool in_group(int value) const;
  std::size_t tensor(int value);           // index into spec.args, added on first use
  int tensor_of(std::size_t param) const;  // the Value::tensor of a tensor parameter, or -1
  // A run-time Scalar argument of member `member` (a kernel parameter named `name`); returns
  // its index into spec.args.
  std::size_t scalar(int member, int argument, const std::string& name);
  const Graph& g;
  const FusionGroup& group;
  KernelSpec& spec;
  std::map<int, int> member_of;        // node -> member position
  std::map<int, int> param_of_tensor;  // Value::tensor -> index into spec.args
  std::map<int, const TensorMeta*> meta_of_param;
};

const char* cuda_type(c10::ScalarType t);

// `expr` (an fp32 value) rounded to what a tensor of `dtype` stores, as eager rounds an op's
// result: unchanged for fp32.
std::string round_to_dtype(const std::string& expr, c10::ScalarType dtype);
// An op's result `expr` as eager's kernel for the op leaves it: round_to_dtype, and in fp32 kept
// out of a later op's FMA (hp::round_to<float>: a row kernel's x * s - max is 0 for the row's
// maximum, as eager's is).
std::string op_result(const std::string& expr, c10::ScalarType dtype);
// The expression of pointwise node `n` (its op `op` from the table) over operand names `t` and
// scalar names `s`, rounded to its output's dtype: what every generator emits for a member.
std::string pointwise_expression(const Graph& g, const Node& n, const PointwiseOp& op,
                                 const std::vector<std::string>& t,
                                 const std::vector<std::string>& s);
// Generated code that ends a block's sums over a chunk of the rows of a 32-column tile (a norm
// backward's column blocks, tall column kernels). The warps' sums are in `smem`[k][warp][lane];
// they are added in warp order into the workspace `ws` at the block's `chunk`, and the tile's
// last chunk to finish (a counter per tile in `done`) adds the chunks up in order, runs
// `stores[k]` with sum k in `s`, and resets the counter for the next launch. Expects `tile`,
// `chunk`, `c`, `kCols`, `kChunks` and a __shared__ bool `hp_last` in scope.
struct ChunkedSumNames {
  std::string smem, warp, lane, warps, ws, done;
};
std::string chunked_sum_epilogue(const ChunkedSumNames& v, const std::vector<std::string>& stores);
// The statement that stores the sum `s` into column c of output `a` (skipped when it is optional
// and not passed).
std::string column_store(const KernelArg& a);

// Whether the group's last member makes `tensor` (a Value::tensor): its kernel runs inside that
// op, before the caller holds any of its outputs, so each of them must be written (the others
// a group makes are optional: skipped when nobody but hotpath holds them at launch).
bool made_by_last(const Graph& g, const FusionGroup& group, int tensor);
// The largest element offset `m` reaches from its first element: 32-bit indexing fits when it
// is below 2^31. Kernels index from the pointer the executor passes, Tensor::data_ptr(), which
// already includes the storage offset: generated code never adds it again.
std::int64_t max_offset(const TensorMeta& m);

}  // namespace hotpath::detail
