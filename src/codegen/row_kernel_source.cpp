// Row kernels, second step: the grid and the source (codegen/row_kernel.h).
#include <algorithm>

#include "codegen/row_kernel.h"
#include "common/error.h"

namespace hotpath::detail {
namespace {

constexpr std::int64_t kCachedRegisters = 96;  // floats per lane for a row's loads
// Sums over all rows (a norm backward's weight gradient): at most this many chunks of rows per
// column tile, whose partial sums the tile's last block adds up; row blocks: at most this many
// (they stride over the rows).
constexpr std::int64_t kMaxChunks = 64;
constexpr std::int64_t kMaxRowBlocks = 2048;
constexpr int kColumnUnroll = 4;  // rows in flight per warp of a column block

}  // namespace

std::set<std::size_t> RowKernelGenerator::closure(const std::vector<std::string>& targets,
                                                  bool rows) const {
  // Per-row values of a column block may not depend on a reduction: the partitioner keeps groups
  // that would need one apart.
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
}

// Outputs stored once at the end (sums over all rows): named, optional unless the last member
// makes them.
void RowKernelGenerator::name_output(std::size_t p) {
  KernelArg& a = spec.args[p];
  a.name = "t" + std::to_string(p);
  a.optional = !made_by_last(g, group, params.tensor_of(p));
}

void RowKernelGenerator::layout() {
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
  column_blocks = !col_sums.empty();
  warps = spec.block / 32;
  tiles = (cols + 31) / 32;
  chunk_rows = std::max<std::int64_t>(warps * 16, (spec.rows + kMaxChunks - 1) / kMaxChunks);
  chunks = std::max<std::int64_t>(1, (spec.rows + chunk_rows - 1) / chunk_rows);
  // No row blocks where they would store nothing (a norm backward whose input needs no
  // gradient, alone): the column blocks are the kernel.
  const bool row_work = !full_stores.empty() || !row_stores.empty() || total.has_value();
  HOTPATH_CHECK(row_work || !col_sums.empty(), "a row kernel that stores nothing");
  row_blocks =
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
  fixed_grid = column_blocks || total;
  row_grid = fixed_grid ? "kRowBlocks" : "gridDim.x";
  spec.index64 = spec.numel > (1LL << 31) - 1;
}

void RowKernelGenerator::emit() {
  layout();
  src << "// hotpath fused row kernel: " << group.nodes.size() << " ops over " << format_meta(dom)
      << "\n//  ";
  for (int m : group.nodes) src << " " << g.node(m).short_name();
  src << "\n#include \"hotpath_runtime.cuh\"\n\n";
  src << "typedef " << (spec.index64 ? "long long" : "int") << " idx_t;\n\n";
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
  if (column_blocks) emit_column_blocks();
  emit_rows();
  if (total) emit_total();
  src << "}\n";
  name_kernel(spec, group.name, src.str());
}

// Blocks after the row blocks: chunk `chunk` of the rows for the 32 columns of `tile`.
void RowKernelGenerator::emit_column_blocks() {
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

void RowKernelGenerator::emit_row_values(int level) {
  for (const Def& d : defs) {
    if (d.row && d.level == level && !d.expr.empty() && emitted_rows.insert(d.name).second)
      src << "    const float " << d.name << " = " << d.expr << ";\n";
  }
}

void RowKernelGenerator::emit_full_values(const std::set<std::size_t>& need) {
  for (std::size_t i : need) {
    src << "      const float " << defs[i].name << " = "
        << (cached && defs[i].load ? defs[i].name + "_r[j]" : defs[i].expr) << ";\n";
  }
}

// The row loop: a pass over the row per reduction level, then the stores.
void RowKernelGenerator::emit_rows() {
  // A warp per row: the row's loads are kept in registers (kPer per lane) when they fit, so that
  // every pass reads them from there, not from memory again.
  const std::int64_t per_lane = (cols + 31) / 32;
  std::int64_t full_loads = 0;
  for (const Def& d : defs) full_loads += d.load ? 1 : 0;
  cached = warp_rows && full_loads * per_lane <= kCachedRegisters;
  close_columns = "    }\n";
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
  emit_row_values(0);
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
    emit_full_values(closure(inputs));
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
    emit_row_values(level);
  }
  std::vector<std::string> stored;
  for (const auto& st : full_stores) stored.push_back(st.second);
  if (!full_stores.empty()) {
    src << "    // stores\n";
    src << columns;
    emit_full_values(closure(stored));
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
}

// The loss over all rows: the warps' totals in order, then the blocks' (the last block to
// finish), as the total kernels do: the result does not depend on scheduling.
void RowKernelGenerator::emit_total() {
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

}  // namespace hotpath::detail
