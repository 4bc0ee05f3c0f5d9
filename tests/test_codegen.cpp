// Partitioning and code generation: which ops form a group (row, column and total kernels among
// them), the kernels' source (goldens), each checked to compile with NVRTC.
#include "fusion_support.h"

using namespace fusion_test;

TEST_CASE("the optimizer partition of an MLP + AdamW step", "[fusion][golden]") {
  const auto plan = mlp_plan(4);
  REQUIRE(plan != nullptr);
  check_golden("mlp_adamw_partition.txt", plan->partition.to_text(*plan->graph));
}

TEST_CASE("reductions along the last dimension fuse with the ops around them", "[fusion][rows]") {
  // The plan runs in every iteration after the signature turned hot: autograd's accumulation
  // into buffers the deferred ops hold (add instead of add_) neither leaves the plan nor makes
  // the iterations look different.
  const auto plan = check_plan_is_eager([](bool hot) { return train_rows(hot, 8); }, 8);
  CHECK(hotpath::stats().hot_signatures() == 1);
  REQUIRE(plan != nullptr);
  const auto& g = *plan->graph;
  const std::string text = plan->partition.to_text(g);
  INFO(text);
  check_golden("row_reductions_partition.txt", text);
  // Every row op of the loop is in a row kernel.
  std::set<std::string> fused_ops;
  int row_groups = 0;
  for (const auto& grp : plan->partition.groups) {
    row_groups += grp.rows() ? 1 : 0;
    for (int n : grp.nodes) fused_ops.insert(g.node(n).short_name());
    CHECK(check_compiles(g, grp).rows == (grp.rows() ? 8 : 0));
  }
  CHECK(row_groups >= 2);
  CHECK(text.find("over f32[] cpu") != std::string::npos);  // its kernel compiled above
  for (const char* op : {"_softmax", "_log_softmax", "mean.dim", "sum.dim_IntList",
                         "_softmax_backward_data", "_log_softmax_backward_data"}) {
    CAPTURE(op);
    CHECK(fused_ops.count(op) == 1);
  }
}

// Found by fuzz_programs on the H100 (seed 289): a sum over the last dimension of a mean kept
// as [rows, 1] joined the row kernel of the mean, which summed the mean over the whole row (38
// times the value eager has). A reduction joins a row kernel only over the group's own rows.
TEST_CASE("a reduction of a per-row value is no reduction of the group's rows", "[fusion][rows]") {
  auto loop = [](bool hot) {
    torch::manual_seed(5);
    auto x = torch::randn({7, 38});
    auto r = torch::randn({7, 1});
    std::unique_ptr<Enabled> on;
    if (hot) on = std::make_unique<Enabled>(cpu_plans(2));
    std::vector<torch::Tensor> out;
    for (int i = 0; i < 6; ++i) {
      auto s = (x * (1 + 0.1 * i)).sigmoid();
      auto m = s.mean(-1, true);             // [7, 1]
      out.push_back(m.sum(-1, true) * 0.5);  // a sum over a dimension of 1
      out.push_back(s / (2 + i) + m);
      // Groups merged by an op that reads both: a reduction over [7, 1] rows (of an input, of
      // a per-row value of the row group) and the row group over [7, 38] (fuzzer seeds
      // 100000051 and 20000661 on the H100).
      out.push_back((r * (1 + i)).sum(-1, true) / s.tanh().mean(-1, true));
      auto k = s.sum(-1, true);
      out.push_back((-k).mean(-1, true).sum(-1, true) - k.sigmoid());
      hotpath::step();
    }
    return out;
  };
  const auto plan = check_plan_is_eager(loop, 6);
  REQUIRE(plan != nullptr);
  const auto& g = *plan->graph;
  INFO(plan->partition.to_text(g));
  for (const auto& grp : plan->partition.groups) {
    std::set<std::vector<std::int64_t>> reduced;  // the shapes the group's reductions read
    for (int n : grp.nodes) {
      const auto& node = g.node(n);
      if (node.short_name() == "sum.dim_IntList" || node.short_name() == "mean.dim") {
        const auto& sizes = g.value(node.input_at(0)).meta.sizes;
        reduced.insert(std::vector<std::int64_t>(sizes.begin(), sizes.end()));
      }
    }
    CHECK(reduced.size() <= 1);
    check_compiles(g, grp);
  }
}

TEST_CASE("rms_norm forward and backward fuse into row kernels", "[fusion][rows]") {
  // ATen decomposes rms_norm (pow, mean over the last dimension, add, rsqrt, mul, mul) and its
  // backward (a sum over the last dimension among pointwise ops).
  auto train = [](bool hot) {
    torch::manual_seed(13);
    auto x = torch::randn({8, 32}, torch::requires_grad());
    auto w = torch::randn({32}, torch::requires_grad());
    auto g = torch::randn({8, 32});
    std::unique_ptr<Enabled> on;
    if (hot) on = std::make_unique<Enabled>(cpu_plans(2));
    std::vector<torch::Tensor> out;
    for (int i = 0; i < 8; ++i) {
      auto y = torch::rms_norm(x, {32}, w, 1e-6);
      auto loss = (y * g).sum();
      loss.backward();
      {
        torch::NoGradGuard ng;
        x -= 0.1 * x.grad();
        w -= 0.1 * w.grad();
        x.grad().zero_();
        w.grad().zero_();
      }
      out.push_back(loss.detach().clone());
      hotpath::step();
    }
    on.reset();
    out.push_back(x.detach().clone());
    out.push_back(w.detach().clone());
    return out;
  };
  const auto plan = check_plan_is_eager(train, 8);
  REQUIRE(plan != nullptr);
  const auto& g = *plan->graph;
  INFO(plan->partition.to_text(g));
  std::set<std::string> in_rows;
  for (const auto& grp : plan->partition.groups) {
    if (!grp.rows()) continue;
    for (int n : grp.nodes) in_rows.insert(g.node(n).short_name());
    check_compiles(g, grp);
  }
  for (const char* op : {"pow.Tensor_Scalar", "mean.dim", "rsqrt", "sum.dim_IntList"}) {
    CAPTURE(op);
    CHECK(in_rows.count(op) == 1);
  }
}

TEST_CASE("layer_norm forward and backward fuse with the ops around them", "[fusion][rows]") {
  // LayerNorm -> GELU -> residual, in training: native_layer_norm's mean and rstd are outputs
  // that its backward reads; the backward fuses with the GELU's backward before it, its weight
  // and bias gradients summed over all rows by the column blocks of the same kernel. Inference:
  // one row kernel for the whole chain. An input that needs no gradient (output_mask[0] false):
  // the backward has only the weight's and bias's gradients to compute.
  for (const bool training : {true, false})
    for (const bool input_grad : {true, false}) {
      if (!training && !input_grad) continue;
      CAPTURE(training, input_grad);
      auto run = [training, input_grad](bool hot) {
        torch::manual_seed(17);
        auto ln = torch::nn::LayerNorm(torch::nn::LayerNormOptions({32}));
        auto x = torch::randn({8, 32}, torch::requires_grad(training && input_grad));
        std::unique_ptr<Enabled> on;
        if (hot) on = std::make_unique<Enabled>(cpu_plans(2));
        std::vector<torch::Tensor> out;
        for (int i = 0; i < 8; ++i) {
          torch::Tensor y;
          if (training) {
            y = torch::gelu(ln->forward(x)) + x;
            (y * y).sum().backward();
            torch::NoGradGuard ng;
            if (input_grad) {
              x -= 0.01 * x.grad();
              x.grad().zero_();
            }
            for (auto& p : ln->parameters()) {
              p -= 0.01 * p.grad();
              p.grad().zero_();
            }
          } else {
            torch::NoGradGuard ng;
            y = torch::gelu(ln->forward(x)) + x;
          }
          out.push_back(y.detach().clone());
          hotpath::step();
        }
        on.reset();
        out.push_back(x.detach().clone());
        for (auto& p : ln->parameters()) out.push_back(p.detach().clone());
        return out;
      };
      const auto plan = check_plan_is_eager(run, 8);
      REQUIRE(plan != nullptr);
      const auto& g = *plan->graph;
      INFO(plan->partition.to_text(g));
      bool ln_fused = false, backward_fused = false;
      for (const auto& grp : plan->partition.groups) {
        const std::set<std::string> ops = op_names(g, grp);
        if (ops.count("native_layer_norm_backward")) {
          backward_fused = true;
          CHECK(grp.rows());
          CHECK(ops.count("gelu_backward") == 1);
          const auto spec = check_compiles(g, grp);
          // 8 rows: one block of rows, then one chunk of rows for the one tile of 32 columns.
          CHECK(spec.fixed_blocks == 2);
          CHECK(spec.workspace_floats == 2 * 32 + 1);  // two sums' partials, one counter
          CHECK(spec.source.find("atomicAdd(&done[tile]") != std::string::npos);
          // No input gradient: no row reductions (sum(gw), sum(gw * xhat)) and no store of it.
          CHECK((spec.source.find("_gwx") != std::string::npos) == input_grad);
          if (input_grad) check_golden("layer_norm_backward_kernel.txt", spec.source);
        }
        if (!ops.count("native_layer_norm")) continue;
        ln_fused = true;
        CHECK(grp.rows());
        CHECK(ops.count("gelu") == 1);
        check_compiles(g, grp);
      }
      CHECK(ln_fused);
      CHECK(backward_fused == training);
    }
}

TEST_CASE("ATen's fused rms_norm (two outputs, as CUDA records it) becomes a row kernel",
          "[fusion][rows]") {
  // On the CPU, at::_fused_rms_norm decomposes before hotpath sees it; on CUDA it is one op with
  // two outputs (out, rstd). Its trace, as the recorder would make it: _fused_rms_norm, gelu.
  using namespace hotpath::detail;
  const auto meta = cuda_meta;
  HotTrace trace;
  OpRecord norm;
  norm.name = "aten::_fused_rms_norm";
  norm.inputs = {TensorInput{0, false, meta({64, 256}), ValueRef{-1, 0}},
                 TensorInput{2, false, meta({256}), ValueRef{-2, 0}}};
  norm.args = {c10::IValue(), c10::IValue(std::vector<std::int64_t>{256}), c10::IValue(),
               c10::IValue(1e-6)};
  norm.outputs = {meta({64, 256}), meta({64, 1})};
  norm.output_alias = {-1, -1};
  norm.output_alive = {false, true};
  OpRecord gelu;
  gelu.name = "aten::gelu";
  gelu.inputs = {TensorInput{0, false, meta({64, 256}), ValueRef{0, 0}}};
  gelu.args = {c10::IValue(), c10::IValue(std::string("none"))};
  gelu.outputs = {meta({64, 256})};
  gelu.output_alias = {-1};
  gelu.output_alive = {true};
  trace.ops = {norm, gelu};
  const Graph g = Graph::from_trace(trace);
  const Partition part = partition_graph(g);
  INFO(part.to_text(g));
  REQUIRE(part.groups.size() == 1);
  CHECK(part.groups[0].rows());
  CHECK(part.groups[0].nodes.size() == 2);
  const KernelSpec spec = check_compiles(g, part.groups[0]);
  INFO(spec.source);
  // Both outputs of the norm are stored (the rstd per row), the gelu result per element.
  CHECK(spec.source.find("rsqrtf(") != std::string::npos);
  CHECK(spec.source.find("[row] = ") != std::string::npos);
  CHECK(spec.rows == 64);
}

TEST_CASE("ATen's fused rms_norm backward (as CUDA records it) fuses with the op before it",
          "[fusion][rows]") {
  // gelu_backward, then _fused_rms_norm_backward (grad_input, grad_weight): one row kernel whose
  // column blocks sum the weight's gradient. An in-place update of a tensor that the norm's
  // inputs are computed from keeps it apart: the column blocks would read rows that the row
  // blocks may already have written. Rows of 2048: a block per row.
  using namespace hotpath::detail;
  const auto meta = cuda_meta;
  for (const std::int64_t cols : {256, 2048})
    for (const bool in_place : {false, true}) {
      CAPTURE(cols, in_place);
      HotTrace trace;
      const std::int64_t pre_producer = in_place ? 0 : -2;  // the update's result, or from outside
      if (in_place) {
        OpRecord add;
        add.name = "aten::add_";
        add.overload = "Tensor";
        add.inputs = {TensorInput{0, true, meta({4096, cols}), ValueRef{-2, 0}},
                      TensorInput{1, false, meta({cols}), ValueRef{-5, 0}}};
        add.args = {c10::IValue(), c10::IValue(), c10::IValue(1.0)};
        add.outputs = {meta({4096, cols})};
        add.output_alias = {0};
        add.output_alive = {true};
        trace.ops.push_back(add);
      }
      const std::int64_t first = in_place ? 1 : 0;
      OpRecord gelu;
      gelu.name = "aten::gelu_backward";
      gelu.inputs = {TensorInput{0, false, meta({4096, cols}), ValueRef{-1, 0}},
                     TensorInput{1, false, meta({4096, cols}), ValueRef{pre_producer, 0}}};
      gelu.args = {c10::IValue(), c10::IValue(), c10::IValue(std::string("none"))};
      gelu.outputs = {meta({4096, cols})};
      gelu.output_alias = {-1};
      gelu.output_alive = {false};
      OpRecord norm;
      norm.name = "aten::_fused_rms_norm_backward";
      norm.inputs = {TensorInput{0, false, meta({4096, cols}), ValueRef{first, 0}},
                     TensorInput{1, false, meta({4096, cols}), ValueRef{-3, 0}},
                     TensorInput{3, false, meta({4096, 1}), ValueRef{-4, 0}},
                     TensorInput{4, false, meta({cols}), ValueRef{-6, 0}}};
      norm.args = {c10::IValue(), c10::IValue(), c10::IValue(std::vector<std::int64_t>{cols}),
                   c10::IValue(), c10::IValue(), c10::IValue(c10::List<bool>({true, true}))};
      norm.outputs = {meta({4096, cols}), meta({cols})};
      norm.output_alias = {-1, -1};
      norm.output_alive = {true, true};
      trace.ops.push_back(gelu);
      trace.ops.push_back(norm);
      const Graph g = Graph::from_trace(trace);
      const Partition part = partition_graph(g);
      INFO(part.to_text(g));
      const int norm_node = static_cast<int>(first) + 1;
      const int grp = part.group_of[static_cast<std::size_t>(norm_node)];
      REQUIRE(grp >= 0);  // alone, it still saves eager's second kernel
      const FusionGroup& fg = part.groups[static_cast<std::size_t>(grp)];
      CHECK(fg.rows());
      CHECK(fg.nodes.size() == (in_place ? 1u : 2u));
      const KernelSpec spec = check_compiles(g, fg);
      INFO(spec.source);
      // 4096 rows of 256: 512 blocks of 8 rows; 32 chunks of 128 rows (16 per warp) for each of
      // the 8 column tiles. Of 2048: 2048 blocks of one row; 32 chunks for each of 64 tiles.
      const std::int64_t tiles = cols / 32, row_blocks = cols == 256 ? 512 : 2048;
      CHECK(spec.rows == 4096);
      CHECK(spec.rows_per_block == (cols == 256 ? 8 : 1));
      CHECK(spec.fixed_blocks == row_blocks + 32 * tiles);
      CHECK(spec.workspace_floats == 32 * cols + tiles);
      CHECK(spec.counters_at == 32 * cols);
      CHECK(spec.source.find("kRowBlocks = " + std::to_string(row_blocks) + ";") !=
            std::string::npos);
      CHECK(spec.source.find("kChunks = 32;") != std::string::npos);
      CHECK((spec.source.find("hp::block_sum(") != std::string::npos) == (cols == 2048));
      // The gradient of the weight is one value per column; rms has no mean and no bias.
      CHECK(spec.source.find("[c] = hp::from_float<float>(s);") != std::string::npos);
      CHECK(spec.source.find("acc1") == std::string::npos);
      CHECK((spec.source.find("gelu_erf_backward") != std::string::npos) == !in_place);
    }
}

TEST_CASE("a norm backward without the input's gradient is its column blocks alone",
          "[fusion][rows]") {
  // _fused_rms_norm_backward with output_mask [false, true] (the norm of a model's input): no
  // grad_input; alone in its group, the kernel has no row blocks at all.
  using namespace hotpath::detail;
  const auto meta = cuda_meta;
  HotTrace trace;
  OpRecord norm;
  norm.name = "aten::_fused_rms_norm_backward";
  norm.inputs = {TensorInput{0, false, meta({4096, 256}), ValueRef{-1, 0}},
                 TensorInput{1, false, meta({4096, 256}), ValueRef{-2, 0}},
                 TensorInput{3, false, meta({4096, 1}), ValueRef{-3, 0}},
                 TensorInput{4, false, meta({256}), ValueRef{-4, 0}}};
  norm.args = {c10::IValue(), c10::IValue(), c10::IValue(std::vector<std::int64_t>{256}),
               c10::IValue(), c10::IValue(), c10::IValue(c10::List<bool>({false, true}))};
  norm.outputs = {TensorMeta{}, meta({256})};  // grad_input undefined
  norm.output_alias = {-1, -1};
  norm.output_alive = {false, true};
  trace.ops = {norm};
  const Graph g = Graph::from_trace(trace);
  const Partition part = partition_graph(g);
  INFO(part.to_text(g));
  REQUIRE(part.groups.size() == 1);
  const KernelSpec spec = check_compiles(g, part.groups[0]);
  INFO(spec.source);
  CHECK(spec.fixed_blocks == 32 * 8);  // 32 chunks of 128 rows for each of 8 tiles, no row block
  CHECK(spec.source.find("kRowBlocks = 0;") != std::string::npos);
  CHECK(spec.source.find("_gwx") == std::string::npos);
  CHECK(spec.source.find("[base + c] = ") == std::string::npos);  // nothing stored per element
}

TEST_CASE("cross-entropy forward and backward fuse into row kernels", "[fusion][rows]") {
  // cross_entropy = log_softmax + nll_loss: one row kernel whose loss (mean or sum) is summed
  // over all rows across its blocks; its backward: nll_loss_backward (the target's column of
  // each row) and log_softmax's backward, one row kernel, for each reduction. One target is the
  // ignore_index: its row counts for nothing. 1500 classes: a block per row.
  for (const std::int64_t classes : {10, 1500})
    for (const char* reduction : {"mean", "sum", "none"}) {
      CAPTURE(classes, reduction);
      auto train = [reduction, classes](bool hot) {
        torch::manual_seed(23);
        auto x = torch::randn({8, 16});
        auto w = torch::randn({16, classes}, torch::requires_grad());
        auto target = torch::randint(0, classes, {8}, torch::kLong);
        target[3] = -100;
        namespace F = torch::nn::functional;
        auto options = F::CrossEntropyFuncOptions();
        if (std::string(reduction) == "sum") options.reduction(torch::kSum);
        if (std::string(reduction) == "none") options.reduction(torch::kNone);
        return sgd_loop(hot, w, [&] {
          // The scaling is a member with a run-time scalar (a kernel parameter named s<k>).
          auto loss = F::cross_entropy(x.mm(w) * 0.5, target, options);
          if (loss.dim() > 0) loss = loss.sum();
          loss.backward();
          return loss;
        });
      };
      const auto plan = check_plan_is_eager(train, 8);
      REQUIRE(plan != nullptr);
      const auto& g = *plan->graph;
      INFO(plan->partition.to_text(g));
      bool fused = false, forward = false;
      for (const auto& grp : plan->partition.groups) {
        const std::set<std::string> ops = op_names(g, grp);
        if (ops.count("nll_loss_forward")) {
          forward = true;
          CHECK(grp.rows());
          CHECK(ops.count("_log_softmax") == 1);
          const auto spec = check_compiles(g, grp);
          INFO(spec.source);
          // 8 rows of 10: one block of 8 warps; of 1500: 8 blocks of one row. A loss and a count
          // per block, then the counter.
          const int blocks = classes == 10 ? 1 : 8;
          CHECK(spec.fixed_blocks == blocks);
          CHECK(spec.workspace_floats == 2 * blocks + 1);
          CHECK(spec.source.find("atomicAdd(done, 1u)") != std::string::npos);
          CHECK(spec.source.find("const float s") != std::string::npos);  // the scaling's scalar
          if (std::string(reduction) == "mean" && classes == 10)
            check_golden("cross_entropy_kernel.txt", spec.source);
          CHECK(spec.source.find(std::string("[0] = hp::from_float<float>(") +
                                 (std::string(reduction) == "mean" ? "hp_s0 / hp_s1" : "hp_s0") +
                                 ")") != std::string::npos);
        }
        if (!ops.count("nll_loss_backward")) continue;
        fused = true;
        CHECK(grp.rows());
        CHECK(ops.count("_log_softmax_backward_data") == 1);
        const auto spec = check_compiles(g, grp);
        INFO(spec.source);
        // The targets are one int64 per row, compared with the column index; -100 is ignored.
        CHECK(spec.source.find("const long long* __restrict__") != std::string::npos);
        CHECK(spec.source.find("static_cast<float>(c) == ") != std::string::npos);
        CHECK(spec.source.find("-1.000000000e+02f") != std::string::npos);
      }
      CHECK(fused);
      CHECK(forward == (std::string(reduction) != "none"));  // none: one loss per row, eager
    }
}

TEST_CASE("masked softmax over heads fuses with a mask broadcast over batch and heads",
          "[fusion][rows]") {
  // Attention's shape: scores [B, H, T, T] scaled, a causal mask [T, T] (bool) filled with -inf,
  // softmax over the last dimension; forward and backward. The mask is neither one row for all
  // rows nor one value per row: the row kernel indexes it from the row number.
  auto train = [](bool hot) {
    torch::manual_seed(29);
    auto x = torch::randn({2, 3, 8, 8}, torch::requires_grad());
    auto g = torch::randn({2, 3, 8, 8});
    auto mask = torch::ones({8, 8}).triu(1).to(torch::kBool);
    return sgd_loop(hot, x, [&] {
      auto p = torch::softmax((x * 0.5).masked_fill(mask, -INFINITY), -1);
      (p * g).sum().backward();
      return p;
    });
  };
  const auto plan = check_plan_is_eager(train, 8);
  REQUIRE(plan != nullptr);
  const auto& g = *plan->graph;
  INFO(plan->partition.to_text(g));
  bool forward = false;
  for (const auto& grp : plan->partition.groups) {
    const std::set<std::string> ops = op_names(g, grp);
    if (!ops.count("_softmax")) continue;
    forward = true;
    CHECK(grp.rows());
    CHECK((ops.count("masked_fill.Scalar") + ops.count("masked_fill_.Scalar")) == 1);
    const auto spec = check_compiles(g, grp);
    INFO(spec.source);
    // The [8, 8] mask over [2, 3, 8, 8]: row r reads mask row r % 8.
    CHECK(spec.source.find("(row / 1 % 8) * 8 + c * 1]") != std::string::npos);
  }
  CHECK(forward);
}

TEST_CASE("codegen of a row kernel: softmax over rows with a broadcast row", "[fusion][golden]") {
  // Rows of up to 1024 elements: a warp per row (golden source); longer ones: a block per row.
  for (const std::int64_t cols : {16, 2048}) {
    CAPTURE(cols);
    torch::manual_seed(5);
    auto x = torch::randn({4, cols});
    auto w = torch::randn({cols});
    Enabled on(cpu_plans(2));
    for (int i = 0; i < 3; ++i) {
      auto y = torch::softmax(x * 0.5 + w, -1) * 2.0;
      hotpath::step();
    }
    const auto plan = last_plan();
    REQUIRE(plan != nullptr);
    REQUIRE(plan->groups.size() == 1);
    const auto& spec = plan->groups[0].spec;
    if (cols == 16) {
      check_golden("softmax_row_kernel.txt", spec.source);
      CHECK(spec.rows_per_block == 8);
    } else {
      CHECK(spec.source.find("hp::block_max(") != std::string::npos);
      CHECK(spec.rows_per_block == 1);
    }
    INFO(spec.source);
    CHECK(hotpath::detail::nvrtc_compile(spec.source, spec.name, 90,
                                         hotpath::detail::runtime_headers(), "")
              .cubin.size() > 0);
  }
}

TEST_CASE("codegen of a small broadcast chain", "[fusion][golden]") {
  torch::manual_seed(4);
  auto a = torch::randn({4, 8}), b = torch::randn({8}), t = torch::randn({8, 4});
  Enabled on(cpu_plans(2));
  for (int i = 0; i < 2; ++i) {
    auto y = ((a * b).add(t.t(), 0.5)).sigmoid().to(torch::kHalf);
    hotpath::step();
  }
  const auto plan = last_plan();
  REQUIRE(plan != nullptr);
  REQUIRE(plan->partition.groups.size() == 1);
  const auto spec = hotpath::detail::generate_kernel(*plan->graph, plan->partition.groups[0]);
  check_golden("broadcast_chain.txt", plan->graph->to_text() + "\n" + spec.source);
  CHECK(spec.vec == 1);  // a transposed operand: no vector path
}

TEST_CASE("a stack or cat of a group's values is stored by the group's kernel", "[fusion][sink]") {
  // Rotary embedding, both layouts: interleaved pairs put back with stack(-1) and flatten, halves
  // put back with cat(-1). The group that computes the rotated values writes them into the
  // result at their places: no copy kernel (the layout ops before them are views).
  for (const bool interleaved : {true, false}) {
    CAPTURE(interleaved);
    auto loop = [&](bool hot) {
      torch::manual_seed(31);
      auto q = torch::randn({2, 6, 3, 8});
      auto angle = torch::randn({1, 6, 1, 4});
      auto cos = angle.cos(), sin = angle.sin();
      std::unique_ptr<Enabled> on;
      if (hot) on = std::make_unique<Enabled>(cpu_plans(2));
      std::vector<torch::Tensor> out;
      for (int i = 0; i < 6; ++i) {
        using torch::indexing::None;
        using torch::indexing::Slice;
        const auto a = interleaved ? q.index({"...", Slice(0, None, 2)}) : q.narrow(-1, 0, 4);
        const auto b = interleaved ? q.index({"...", Slice(1, None, 2)}) : q.narrow(-1, 4, 4);
        const std::vector<torch::Tensor> rotated = {a * cos - b * sin, a * sin + b * cos};
        out.push_back(interleaved ? torch::stack(rotated, -1).flatten(-2)
                                  : torch::cat(rotated, -1));
        hotpath::step();
      }
      return out;
    };
    const auto plan = check_plan_is_eager(loop, 6);
    REQUIRE(plan != nullptr);
    const auto& g = *plan->graph;
    const std::string text = plan->partition.to_text(g);
    INFO(text);
    REQUIRE(plan->partition.groups.size() == 1);
    const auto& grp = plan->partition.groups[0];
    const auto ops = op_names(g, grp);
    CHECK(ops.count(interleaved ? "stack" : "cat") == 1);
    CHECK(ops.count("mul.Tensor") == 1);
    CHECK(text.find(":stack (") == std::string::npos);  // no eager stack or cat
    CHECK(text.find(":cat (") == std::string::npos);
    const auto spec = check_compiles(g, grp);
    INFO(spec.source);
    CHECK(spec.vec == 1);
    CHECK_FALSE(spec.interpretable());
    // The second value lands one element (interleaved) or half a row (halves) after the first.
    CHECK(spec.source.find(interleaved ? " + 1] = hp::from_float" : " + 4] = hp::from_float") !=
          std::string::npos);
  }
}

TEST_CASE("a stack that a kernel cannot store stays eager, and says why", "[fusion][sink]") {
  auto a = torch::randn({4, 8}), b = torch::randn({4, 8}).to(torch::kHalf),
       c = torch::randn({4, 8});
  Enabled on(cpu_plans(2));
  for (int i = 0; i < 3; ++i) {
    auto mixed = torch::stack({a * 2, (b * 2).to(torch::kFloat) + 1});  // one group, fp32: fused
    auto promoted = torch::stack({a * 3 + 1, b * 3});      // fp32 and fp16 values: ATen promotes
    auto alone = torch::cat({a, a}, 1);                    // no group computes its inputs
    auto outside = torch::cat({(a * 4).sigmoid(), c}, 0);  // `c` only the cat reads: loaded
    hotpath::step();
  }
  const auto plan = last_plan();
  REQUIRE(plan != nullptr);
  const auto& g = *plan->graph;
  const std::string text = plan->partition.to_text(g);
  INFO(text);
  int fused_stacks = 0;
  for (const auto& grp : plan->partition.groups) fused_stacks += op_names(g, grp).count("stack");
  CHECK(fused_stacks == 1);
  CHECK(text.find("stack (an input of another dtype)") != std::string::npos);
  // The group with the cat reads `c` from the cat's list: the kernel parameter says where.
  int listed = 0;
  for (const auto& grp : plan->partition.groups) {
    if (!op_names(g, grp).count("cat")) continue;
    for (const auto& arg : check_compiles(g, grp).args) listed += arg.element == 1 ? 1 : 0;
  }
  CHECK(listed == 1);
  CHECK(text.find("cat (alone (nothing to fuse with))") != std::string::npos);
}
