// Sums across rows: column kernels (sums over every dimension but the last), total kernels
// (mse_loss reduced to one value), and the launch grids codegen gives kernels.
#include "fusion_support.h"

using namespace fusion_test;

TEST_CASE("sums over the first dimension become column kernels", "[fusion][columns]") {
  const auto plan = check_plan_is_eager([](bool hot) { return column_sums(hot); }, 4);
  REQUIRE(plan != nullptr);
  const auto& g = *plan->graph;
  const std::string text = plan->partition.to_text(g);
  INFO(text);
  int column_groups = 0, tall_groups = 0;
  for (const auto& grp : plan->partition.groups) {
    if (!grp.columns()) continue;
    ++column_groups;
    const auto spec = check_compiles(g, grp);
    CHECK_FALSE(spec.interpretable());
    for (int n : grp.nodes) CHECK(g.node(n).short_name() != "div.Tensor");  // reads a sum
    if (grp.nodes.size() == 6) check_golden("column_sum_kernel.txt", spec.source);
    if (grp.domain.sizes[0] <= hotpath::detail::kMaxColumnRows) {
      CHECK(spec.col_tiles == 2);
      CHECK(spec.fixed_blocks == 0);  // the executor chooses the grid
      continue;
    }
    // 4097 rows of 2 columns: one tile, 17 chunks of 256 rows (16 warps, 16 rows each).
    ++tall_groups;
    CHECK(spec.col_tiles == 1);
    CHECK(spec.fixed_blocks == 17);
    CHECK(spec.workspace_floats == 17 * 2 + 1);
    CHECK(spec.source.find("atomicAdd(&hp_done[tile], 1u)") != std::string::npos);
    check_golden("tall_column_sum_kernel.txt", spec.source);
  }
  // The gelu chain with both of its sums in one kernel; the bf16 chain and its sum; the tall sum.
  CHECK(column_groups == 3);
  CHECK(tall_groups == 1);
}

TEST_CASE("mse_loss reduced to one value becomes a total kernel", "[fusion][total]") {
  // Mean and sum are total kernels (compiled here, golden source for the mean); reduction none
  // is not one (it is no reduction).
  for (const auto reduction : {at::Reduction::Mean, at::Reduction::Sum, at::Reduction::None}) {
    CAPTURE(reduction);
    torch::manual_seed(8);
    auto x = torch::randn({16, 40}), y = torch::randn({16, 40});
    std::shared_ptr<const hotpath::detail::Plan> plan;
    std::vector<torch::Tensor> fused, eager;
    for (const bool hot : {false, true}) {
      std::unique_ptr<Enabled> on;
      if (hot) on = std::make_unique<Enabled>(cpu_plans(2));
      auto& out = hot ? fused : eager;
      for (int i = 0; i < 4; ++i) {
        out.push_back(torch::mse_loss(x * (1.0 + i), y, reduction).clone());
        hotpath::step();
      }
      if (hot) plan = last_plan();
    }
    for (std::size_t i = 0; i < fused.size(); ++i) CHECK(torch::equal(fused[i], eager[i]));
    REQUIRE(plan != nullptr);
    const std::string text = plan->partition.to_text(*plan->graph);
    INFO(text);
    int totals = 0;
    for (const auto& grp : plan->partition.groups) {
      if (!grp.total()) continue;
      ++totals;
      CHECK(grp.nodes.size() == 1);
      const auto spec = check_compiles(*plan->graph, grp);
      CHECK(spec.fixed_blocks == 1);  // 640 elements
      if (reduction == at::Reduction::Mean) check_golden("mse_total_kernel.txt", spec.source);
    }
    CHECK(totals == (reduction == at::Reduction::None ? 0 : 1));
  }
}

TEST_CASE("codegen says how many blocks a kernel launches with", "[fusion][codegen]") {
  using hotpath::detail::interpreter_blocks;
  using hotpath::detail::KernelSpec;
  using hotpath::detail::launch_blocks;
  KernelSpec pointwise;
  pointwise.block = 256;
  pointwise.vec = 4;
  pointwise.numel = 1 << 20;  // one block per 1024 elements
  CHECK(launch_blocks(pointwise, 132) == 1024);
  pointwise.numel = 1LL << 30;  // grid-stride beyond 16 blocks per SM
  CHECK(launch_blocks(pointwise, 132) == 132 * 16);
  pointwise.numel = 0;  // an empty tensor still launches one block
  CHECK(launch_blocks(pointwise, 132) == 1);
  KernelSpec rows;
  rows.block = 256;
  rows.rows = 1001;
  rows.rows_per_block = 8;
  CHECK(launch_blocks(rows, 132) == 126);
  KernelSpec columns;
  columns.col_tiles = 40;
  CHECK(launch_blocks(columns, 132) == 40);
  KernelSpec fixed = rows;  // a workspace laid out for its grid: never clamped
  fixed.fixed_blocks = 5000;
  CHECK(launch_blocks(fixed, 132) == 5000);
  CHECK(interpreter_blocks(1 << 20, 132) == 1024);  // a tile of 128 x 8 elements a block
  CHECK(interpreter_blocks(3, 132) == 1);
  CHECK(interpreter_blocks(1LL << 34, 8) == 128);
}

TEST_CASE("sums over every leading dimension become column kernels where operands fold",
          "[fusion][columns]") {
  // A Linear's bias gradient over [B, T, C] is sum([0, 1]) (keepdim): its rows are B x T. Operands
  // that read those rows with one stride (full tensors, a per-column bias) fold them; one that is
  // broadcast over B but not T, or transposed, does not: that group stays eager.
  auto loop = [](bool hot) {
    torch::manual_seed(8);
    auto x = torch::randn({3, 5, 40});
    auto b = torch::randn({40});
    auto pos = torch::randn({5, 40});
    std::unique_ptr<Enabled> on;
    if (hot) on = std::make_unique<Enabled>(cpu_plans(2));
    std::vector<torch::Tensor> out;
    for (int i = 0; i < 4; ++i) {
      x.normal_();
      auto g = torch::gelu(x * 0.5 + b);
      auto s = g.sum(std::vector<std::int64_t>{0, 1}, true);    // [1, 1, 40]
      auto s2 = (g * g).sum(std::vector<std::int64_t>{1, 0});   // dims in another order: [40]
      auto q = (x + pos).sum(std::vector<std::int64_t>{0, 1});  // pos: broadcast over B only
      auto t =
          (x.transpose(0, 1) * 2.0).sum(std::vector<std::int64_t>{0, 1});  // rows not one stride
      auto f = x.sum(0);  // not every leading dimension
      for (const auto& v : {g, s, s2, q, t, f}) out.push_back(v.clone());
      hotpath::step();
    }
    return out;
  };
  const auto eager = loop(false);
  const auto fused = loop(true);
  const auto st = hotpath::stats().last();
  INFO(hotpath::format_stats(hotpath::stats()));
  CHECK(st.fusion.fused_iterations >= 1);
  CHECK(st.fusion.divergences == 0);
  REQUIRE(fused.size() == eager.size());
  for (std::size_t i = 0; i < fused.size(); ++i) CHECK(torch::equal(fused[i], eager[i]));
  const auto plan = last_plan();
  REQUIRE(plan != nullptr);
  const auto& g = *plan->graph;
  INFO(plan->partition.to_text(g));
  int compiled = 0, refused = 0;
  for (const auto& grp : plan->partition.groups) {
    if (!grp.columns()) continue;
    CHECK(grp.domain.sizes.size() == 3);
    try {
      const auto spec = hotpath::detail::generate_kernel(g, grp);
      ++compiled;
      check_compiles(g, grp);
      CHECK(spec.col_tiles == 2);
      CHECK(spec.source.find("r * 40") != std::string::npos);  // 15 rows of 40 columns
    } catch (const hotpath::Error& e) {
      ++refused;
      CHECK(std::string(e.what()).find("does not read the rows") != std::string::npos);
    }
  }
  CHECK(compiled == 1);  // the gelu chain with both of its sums
  CHECK(refused == 2);   // the broadcast and the transposed operand
}
