// Plans, guards, divergence, partitioning, codegen and NVRTC, on CPU (no GPU needed). With
// Config::fuse_cpu the fused groups run through the executor's eager materialisation, so every
// result must be bitwise identical to plain eager.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "codegen/interpreter.h"
#include "codegen/kernel.h"
#include "compile/kernel_builder.h"
#include "compile/kernel_cache.h"
#include "compile/nvrtc.h"
#include "env_var.h"
#include "exec/executor.h"
#include "exec/output_slot.h"
#include "exec/planner.h"
#include "exec/session.h"
#include "fusion/op_table.h"
#include "fusion/partition.h"
#include "hotpath/hotpath.h"
#include "ir/graph.h"
#include "temp_dir.h"

namespace {

hotpath::Config cpu_plans(int threshold) {
  hotpath::Config c;
  c.threshold = threshold;
  c.fuse = true;
  c.fuse_cpu = true;
  c.log_level = hotpath::LogLevel::Warn;
  // These tests check plans, not speed: the governor must not revert them on timing noise, and
  // nothing may be remembered between test runs.
  c.revert_window = 1000000;
  c.remember = false;
  return c;
}

struct Enabled {
  explicit Enabled(const hotpath::Config& c) {
    hotpath::disable_hot_path_detection();
    hotpath::enable_hot_path_detection(c);
  }
  ~Enabled() { hotpath::disable_hot_path_detection(); }
};

std::shared_ptr<const hotpath::detail::Plan> last_plan() {
  auto session = hotpath::detail::thread_session();
  REQUIRE(session != nullptr);
  return session->executor.plan(hotpath::stats().last_signature);
}

// Compares `text` with tests/golden/<name>; HOTPATH_UPDATE_GOLDEN=1 rewrites the file.
void check_golden(const std::string& name, const std::string& text) {
  const std::string path = std::string(HOTPATH_GOLDEN_DIR) + "/" + name;
  const char* update = std::getenv("HOTPATH_UPDATE_GOLDEN");
  if (update != nullptr && std::string(update) == "1") {
    std::ofstream(path) << text;
    return;
  }
  std::ifstream f(path);
  INFO("golden file " << path << " (HOTPATH_UPDATE_GOLDEN=1 rewrites it)");
  REQUIRE(f.good());
  std::stringstream ss;
  ss << f.rdbuf();
  CHECK(ss.str() == text);
}

struct Mlp {
  torch::nn::Sequential model;
  torch::optim::AdamW opt;
  torch::Tensor x, y;
  Mlp()
      : model(torch::nn::Linear(16, 32), torch::nn::GELU(), torch::nn::Linear(32, 16)),
        opt(model->parameters(), torch::optim::AdamWOptions(1e-2)),
        x(torch::randn({8, 16})),
        y(torch::randn({8, 16})) {}
  void train_step(int i) {
    for (auto& g : opt.param_groups()) g.options().set_lr(1e-2 / (1.0 + 0.1 * i));  // a schedule
    opt.zero_grad();
    auto loss = torch::mse_loss(model->forward(x), y);
    loss.backward();
    opt.step();
  }
  std::vector<torch::Tensor> params() {
    std::vector<torch::Tensor> p;
    for (auto& t : model->parameters()) p.push_back(t.detach().clone());
    return p;
  }
};

std::vector<torch::Tensor> train_mlp(bool hot, int iterations) {
  torch::manual_seed(7);
  Mlp mlp;
  std::unique_ptr<Enabled> on;
  if (hot) on = std::make_unique<Enabled>(cpu_plans(3));
  for (int i = 0; i < iterations; ++i) {
    mlp.train_step(i);
    hotpath::step();
  }
  return mlp.params();
}

}  // namespace

TEST_CASE("CPU plans of an MLP + AdamW step are identical to eager", "[fusion]") {
  const auto eager = train_mlp(false, 14);
  torch::manual_seed(7);
  Mlp mlp;
  Enabled on(cpu_plans(3));
  for (int i = 0; i < 14; ++i) {
    mlp.train_step(i);
    hotpath::step();
  }
  const auto s = hotpath::stats().last();
  INFO(hotpath::format_stats(hotpath::stats()));
  REQUIRE(s.fusion.planned);
  CHECK(s.fusion.groups.size() >= 4);  // AdamW: one group per parameter at least
  // Hot at the end of iteration hot_at; the plan (no compile on CPU) runs from the next one.
  CHECK(s.fusion.first_fused_iteration == s.hot_at_iteration + 1);
  CHECK(s.fusion.fused_iterations == 14 - s.hot_at_iteration);
  CHECK(s.fusion.divergences == 0);
  for (const auto& g : s.fusion.groups) CHECK(g.eager_runs == s.fusion.fused_iterations);
  // The per-parameter AdamW updates differ only in size: one kernel source (one compile) for all.
  const auto plan = last_plan();
  REQUIRE(plan != nullptr);
  std::set<std::string> adamw_kernels;
  for (const auto& g : plan->groups) {
    if (g.name.find("addcdiv") != std::string::npos) adamw_kernels.insert(g.spec.source);
  }
  CHECK(adamw_kernels.size() == 1);
  const auto fused = mlp.params();
  REQUIRE(fused.size() == eager.size());
  for (std::size_t i = 0; i < fused.size(); ++i) CHECK(torch::equal(fused[i], eager[i]));
}

TEST_CASE("a paused model between fused iterations runs eagerly and disturbs nothing", "[fusion]") {
  const auto eager = train_mlp(false, 14);
  torch::manual_seed(7);
  Mlp mlp;
  torch::manual_seed(7);
  Mlp other;  // a comparison run of the same model, as a benchmark interleaves it
  Enabled on(cpu_plans(3));
  std::int64_t seen = 0;
  for (int i = 0; i < 14; ++i) {
    mlp.train_step(i);
    hotpath::step();
    seen = hotpath::stats().ops_seen;
    {
      hotpath::Pause pause;
      other.train_step(i);
    }
    CHECK(hotpath::stats().ops_seen == seen);  // the paused step, backward included, is unseen
  }
  CHECK(hotpath::is_enabled());
  const auto s = hotpath::stats().last();
  CHECK(s.fusion.fused_iterations == 14 - s.hot_at_iteration);
  CHECK(s.fusion.divergences == 0);
  const auto fused = mlp.params(), paused = other.params();
  REQUIRE(fused.size() == eager.size());
  for (std::size_t i = 0; i < fused.size(); ++i) {
    CHECK(torch::equal(fused[i], eager[i]));
    CHECK(torch::equal(paused[i], eager[i]));
  }
}

TEST_CASE("a pause mid-iteration materialises what was deferred", "[fusion]") {
  auto a = torch::randn({64});
  Enabled on(cpu_plans(2));
  torch::Tensor y;
  for (int i = 0; i < 6; ++i) {
    a.mul_(0.5).add_(1.0);
    y = a * 3;
    if (i == 5) {
      hotpath::Pause pause;  // deferred ops of the group must be written before this reads them
      CHECK(torch::allclose(y, a * 3));
    }
    y = y.sigmoid();
    hotpath::step();
  }
  const auto s = hotpath::stats().last();
  CHECK(s.fusion.fused_iterations >= 2);
  CHECK(torch::allclose(y, (a * 3).sigmoid()));
}

TEST_CASE("an iteration paused in its middle goes on with its plan", "[fusion]") {
  // A step that spans a pause (logging, or a comparison model stepped under Pause between the
  // halves of a two-pass step) keeps its plan: the groups after the pause run fused again.
  auto a = torch::randn({64}), b = torch::randn({64});
  auto eager_a = a.clone(), eager_b = b.clone();
  for (int i = 0; i < 8; ++i) {
    eager_a.mul_(0.5).add_(1.0);
    eager_b.mul_(0.25).add_(eager_a);
  }
  Enabled on(cpu_plans(2));
  for (int i = 0; i < 8; ++i) {
    a.mul_(0.5).add_(1.0);
    {
      hotpath::Pause pause;
      CHECK(torch::equal(a, a.clone()));  // the first group is written before the pause
    }
    b.mul_(0.25).add_(a);
    hotpath::step();
  }
  const auto s = hotpath::stats().last();
  CHECK(s.fusion.divergences == 0);
  CHECK(s.fusion.fused_iterations == 8 - s.hot_at_iteration);
  CHECK(torch::equal(a, eager_a));
  CHECK(torch::equal(b, eager_b));
}

TEST_CASE("an op that leaves the plan mid-group sees materialised values", "[fusion]") {
  torch::manual_seed(1);
  auto a = torch::randn({64, 32}), b = torch::randn({64, 32}), c = torch::randn({32});
  const auto ref = (a * b + c).sigmoid();
  const auto ref_sum = (a * b).sum();
  std::vector<torch::Tensor> outs, sums;
  {
    Enabled on(cpu_plans(3));
    for (int i = 0; i < 12; ++i) {
      auto t1 = a * b;
      if (i >= 6 && i % 2 == 0)
        sums.push_back(t1.sum());  // not in the plan: reads a deferred value
      auto t2 = t1 + c;
      outs.push_back(t2.sigmoid());
      hotpath::step();
    }
    const auto s = hotpath::stats();
    INFO(hotpath::format_stats(s));
    std::int64_t divergences = 0, fused = 0;
    for (const auto& sig : s.signatures) {
      divergences += sig.fusion.divergences;
      fused += sig.fusion.fused_iterations;
    }
    // A sum leaves the plan at least once (before the 4-op variant is hot too); then the plan
    // armed is the one predicted from the alternation (a plain iteration follows a summing one).
    CHECK(divergences >= 1);
    CHECK(fused >= 3);
  }
  for (const auto& o : outs) CHECK(torch::equal(o, ref));
  REQUIRE(sums.size() == 3);
  for (const auto& x : sums) CHECK(torch::allclose(x, ref_sum));
}

TEST_CASE("a shape change or a new scalar never reuses a plan wrongly", "[fusion]") {
  torch::manual_seed(2);
  auto a = torch::randn({16, 8}), b = torch::randn({16, 8});
  auto a2 = torch::randn({8, 16}), b2 = torch::randn({8, 16});
  std::vector<std::pair<torch::Tensor, torch::Tensor>> runs;  // output, reference
  {
    Enabled on(cpu_plans(2));
    for (int i = 0; i < 10; ++i) {
      const double s = 0.5 + i;  // a run-time scalar: same signature, new value
      const bool other = i == 6;
      auto& x = other ? a2 : a;
      auto& y = other ? b2 : b;
      runs.emplace_back((x.mul(s) + y).relu() * y, torch::Tensor());
      hotpath::step();
    }
  }
  for (int i = 0; i < 10; ++i) {
    const double s = 0.5 + i;
    const bool other = i == 6;
    const auto ref = ((other ? a2 : a).mul(s) + (other ? b2 : b)).relu() * (other ? b2 : b);
    CHECK(torch::equal(runs[static_cast<std::size_t>(i)].first, ref));
  }
}

// The plan of the small MLP + AdamW step after `iterations` steps with CPU plans (hot after 3).
std::shared_ptr<const hotpath::detail::Plan> mlp_plan(int iterations) {
  torch::manual_seed(7);
  Mlp mlp;
  Enabled on(cpu_plans(3));
  for (int i = 0; i < iterations; ++i) {
    mlp.train_step(i);
    hotpath::step();
  }
  return last_plan();
}

TEST_CASE("the optimizer partition of an MLP + AdamW step", "[fusion][golden]") {
  const auto plan = mlp_plan(4);
  REQUIRE(plan != nullptr);
  check_golden("mlp_adamw_partition.txt", plan->partition.to_text(*plan->graph));
}

// The GPU plan's batches, decided for the groups of a CPU plan as if they ran on a GPU.
std::vector<std::vector<int>> gpu_batches(const hotpath::detail::Plan& cpu,
                                          hotpath::detail::Plan& plan,
                                          const std::function<void(hotpath::detail::Plan&)>& edit) {
  plan.ops = cpu.ops;
  plan.groups = cpu.groups;
  for (auto& g : plan.groups) {
    g.gpu = true;
    g.cache_key = hotpath::detail::kernel_cache_key(g.spec.source, 90);
  }
  edit(plan);
  hotpath::detail::plan_batches(*cpu.graph, plan);
  return plan.batches;
}

TEST_CASE("an optimizer's groups with one kernel launch together", "[fusion][batches]") {
  const auto cpu = mlp_plan(4);
  REQUIRE(cpu != nullptr);
  // mse_loss, mse_loss_backward, two bias sums, AdamW per parameter
  REQUIRE(cpu->groups.size() == 8);
  {
    hotpath::detail::Plan plan;
    const auto batches = gpu_batches(*cpu, plan, [](hotpath::detail::Plan&) {});
    REQUIRE(batches.size() == 1);
    CHECK(batches[0] == std::vector<int>{4, 5, 6, 7});
    for (int gi : {4, 5, 6}) {
      const int last = plan.groups[static_cast<std::size_t>(gi)].ops.back();
      CHECK_FALSE(plan.ops[static_cast<std::size_t>(last)].launch);
      CHECK(plan.ops[static_cast<std::size_t>(last)].batch == -1);
    }
    CHECK(plan.ops.back().batch == 0);  // the last op of the step launches all four
    CHECK_FALSE(plan.ops.back().launch);
    for (int gi : {0, 1, 2, 3})  // other kernels launch alone, at their last op
      CHECK(plan.ops[static_cast<std::size_t>(plan.groups[static_cast<std::size_t>(gi)].ops.back())]
                .launch);
    // The batch's kernel gets its multi entry, which compiles; other kernels have none.
    CHECK(plan.groups[4].spec.multi_name.empty());
    const auto& fg = cpu->partition.groups[4];
    const auto spec = hotpath::detail::generate_kernel(*cpu->graph, fg, true);
    CHECK(spec.multi_name == spec.name + "_multi");
    CHECK(spec.multi_segments >= 4);
    CHECK(hotpath::detail::multi_segment_bytes(spec) * spec.multi_segments + 8 <= 4096);
    INFO(spec.source);
    CHECK(hotpath::detail::nvrtc_compile(spec.source, spec.multi_name, 90,
                                         hotpath::detail::runtime_headers(), "")
              .cubin.size() > 0);
  }
  {  // Another kernel in the middle: the runs on either side of it.
    hotpath::detail::Plan plan;
    const auto batches = gpu_batches(
        *cpu, plan, [](hotpath::detail::Plan& p) { p.groups[5].cache_key = "another kernel"; });
    REQUIRE(batches.size() == 1);
    CHECK(batches[0] == std::vector<int>{6, 7});
  }
  {  // A group without a multi entry (a row or column kernel) never joins one.
    hotpath::detail::Plan plan;
    const auto batches = gpu_batches(*cpu, plan, [](hotpath::detail::Plan& p) {
      for (int gi : {4, 6}) p.groups[static_cast<std::size_t>(gi)].spec.multi_segments = 0;
    });
    CHECK(batches.empty());
  }
  {  // CPU groups run ATen's kernels: no batches.
    hotpath::detail::Plan plan;
    const auto batches = gpu_batches(*cpu, plan, [](hotpath::detail::Plan& p) {
      for (auto& g : p.groups) g.gpu = false;
    });
    CHECK(batches.empty());
  }
}

TEST_CASE("on a GPU, fused kernels train the MLP + AdamW step as eager does", "[fusion][gpu]") {
  // The GPU paths CI cannot run: column kernels, the optimizer's batch in one launch, buffers
  // reused for temporaries, kernels compiled in parallel. On the GPU machine (gpu_check.sh).
  if (!torch::cuda::is_available()) {
    WARN("no CUDA device: this test runs on the GPU machine (benchmarks/gpu_check.sh)");
    return;
  }
  hotpath_test::TempDir cache("hotpath-gpu-test");
  hotpath::Stats stats;
  auto train = [&](bool hot) {
    torch::manual_seed(7);
    torch::nn::Sequential model(torch::nn::Linear(64, 256), torch::nn::GELU(),
                                torch::nn::Linear(256, 64));
    model->to(torch::kCUDA);
    torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-2));
    auto x = torch::randn({32, 64}, torch::kCUDA), y = torch::randn({32, 64}, torch::kCUDA);
    hotpath::Config c = cpu_plans(3);
    c.fuse_cpu = false;
    c.cache_dir = cache.path();
    std::unique_ptr<Enabled> on;
    if (hot) on = std::make_unique<Enabled>(c);
    for (int i = 0; i < 40; ++i) {
      opt.zero_grad();
      torch::mse_loss(model->forward(x), y).backward();
      opt.step();
      hotpath::step();
      if (hot && i == 3) hotpath::wait_for_compilation();
    }
    if (hot) stats = hotpath::stats();
    std::vector<torch::Tensor> p;
    for (auto& t : model->parameters()) p.push_back(t.detach().cpu());
    return p;
  };
  const auto eager = train(false);
  const auto fused = train(true);
  const auto s = stats.last();
  INFO(hotpath::format_stats(stats));
  CHECK(s.fusion.divergences == 0);
  CHECK(s.fusion.fused_iterations >= 35);
  // mse_loss, mse_loss_backward, two column sums, AdamW x4
  REQUIRE(s.fusion.groups.size() == 8);
  for (const auto& g : s.fusion.groups) {
    CAPTURE(g.name);
    CHECK(g.error.empty());
    CHECK(g.launches >= 35);  // every iteration after the compile, on the group's own kernel
    CHECK(g.interpreted == 0);
  }
  REQUIRE(fused.size() == eager.size());
  for (std::size_t i = 0; i < fused.size(); ++i) {
    const double err = ((fused[i] - eager[i]).norm() / eager[i].norm()).item<double>();
    CAPTURE(i, err);
    CHECK(err <= 1e-4);  // after 40 AdamW steps; each kernel agrees with eager to ~1e-7
  }
}

TEST_CASE("on a GPU, norms and cross-entropy train as eager does", "[fusion][gpu]") {
  // LayerNorm -> Linear -> LayerNorm -> GELU -> rms_norm -> Linear -> cross-entropy (ignore_index
  // targets), plain SGD: the norms' backward (column blocks; the first norm's input needs no
  // gradient), nll_loss's forward (a sum across blocks) and backward (the target's column) on
  // their own kernels. On the GPU machine (gpu_check.sh).
  if (!torch::cuda::is_available()) {
    WARN("no CUDA device: this test runs on the GPU machine (benchmarks/gpu_check.sh)");
    return;
  }
  hotpath_test::TempDir cache("hotpath-gpu-test-norms");
  hotpath::Stats stats;
  auto train = [&](bool hot) {
    torch::manual_seed(11);
    torch::nn::Linear l1(32, 64), l2(64, 100);
    torch::nn::LayerNorm ln(torch::nn::LayerNormOptions({64})),
        ln0(torch::nn::LayerNormOptions({32}));
    ln0->to(torch::kCUDA);
    l1->to(torch::kCUDA);
    l2->to(torch::kCUDA);
    ln->to(torch::kCUDA);
    auto w = torch::ones({64}, torch::TensorOptions(torch::kCUDA).requires_grad(true));
    std::vector<torch::Tensor> params = l1->parameters();
    for (const auto& t : l2->parameters()) params.push_back(t);
    for (const auto& t : ln->parameters()) params.push_back(t);
    for (const auto& t : ln0->parameters()) params.push_back(t);
    params.push_back(w);
    torch::optim::SGD opt(params, torch::optim::SGDOptions(0.1));
    auto x = torch::randn({128, 32}, torch::kCUDA);
    auto target =
        torch::randint(0, 100, {128}, torch::TensorOptions(torch::kCUDA).dtype(torch::kLong));
    target.index_put_({torch::arange(0, 128, 9, target.options())}, -100);
    hotpath::Config c = cpu_plans(3);
    c.fuse_cpu = false;
    c.cache_dir = cache.path();
    c.verify = true;  // every launch against eager on the same inputs, outputs poisoned first
    std::unique_ptr<Enabled> on;
    if (hot) on = std::make_unique<Enabled>(c);
    for (int i = 0; i < 40; ++i) {
      opt.zero_grad();
      auto h = torch::gelu(ln->forward(l1->forward(ln0->forward(x))));
      h = torch::rms_norm(h, {64}, w, 1e-6);
      torch::nn::functional::cross_entropy(l2->forward(h), target).backward();
      opt.step();
      hotpath::step();
      if (hot && i == 3) hotpath::wait_for_compilation();
    }
    if (hot) stats = hotpath::stats();
    std::vector<torch::Tensor> p;
    for (auto& t : params) p.push_back(t.detach().cpu());
    return p;
  };
  const auto eager = train(false);
  const auto fused = train(true);
  const auto s = stats.last();
  INFO(hotpath::format_stats(stats));
  CHECK(s.fusion.divergences == 0);
  CHECK(s.fusion.fused_iterations >= 35);
  std::set<std::string> seen;
  for (const auto& g : s.fusion.groups) {
    CAPTURE(g.name);
    CHECK(g.error.empty());
    CHECK(g.launches >= 35);  // every iteration after the compile, on the group's own kernel
    CAPTURE(g.checks, g.max_rel_error);
    CHECK(g.checks == g.launches);
    CHECK(g.max_rel_error <= 1e-5);
    for (const char* op :
         {"layer_norm_backward", "rms_norm_backward", "nll_loss_forward", "nll_loss_backward"})
      if (g.name.find(op) != std::string::npos) seen.insert(op);
  }
  CHECK(seen.size() == 4);
  REQUIRE(fused.size() == eager.size());
  for (std::size_t i = 0; i < fused.size(); ++i) {
    const double err = ((fused[i] - eager[i]).norm() / eager[i].norm()).item<double>();
    CAPTURE(i, err);
    CHECK(err <= 1e-4);  // after 40 SGD steps; each kernel agrees with eager to ~1e-7
  }
}

TEST_CASE("views of one tensor updated in turn are a batch only by their plan",
          "[fusion][batches]") {
  // Two in-place chains, on a tensor and on a view of it made outside the loop: one kernel (the
  // element count is a parameter), no op between them, different values in the plan. On the GPU
  // the executor finds the shared storage at run time and launches them one by one, in order
  // (bench_fusion's verify checks the result there); here the plan is what can be checked.
  auto x = torch::randn({4, 8});
  auto y = x.view({32});
  std::shared_ptr<const hotpath::detail::Plan> cpu;
  {
    Enabled on(cpu_plans(2));
    for (int i = 0; i < 3; ++i) {
      x.mul_(0.5).add_(1.0);
      y.mul_(0.25).add_(2.0);
      hotpath::step();
    }
    cpu = last_plan();
  }
  REQUIRE(cpu != nullptr);
  REQUIRE(cpu->groups.size() == 2);
  CHECK(cpu->groups[0].spec.source == cpu->groups[1].spec.source);
  hotpath::detail::Plan plan;
  const auto batches = gpu_batches(*cpu, plan, [](hotpath::detail::Plan&) {});
  REQUIRE(batches.size() == 1);
  CHECK(batches[0] == std::vector<int>{0, 1});
}

namespace {
// Many fusable ops, forward and backward, casts, broadcasting, transposed and 0-dim operands.
torch::Tensor op_zoo(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& row,
                     const torch::Tensor& xt) {
  auto h = torch::gelu(x * w + row, "tanh") + torch::gelu(x, "none");
  h = torch::silu(h) * torch::sigmoid(x) - torch::tanh(xt).t();
  h = torch::softplus(h, 2.0, 10.0).clamp(-3.0, 3.0);
  h = torch::where(x > 0, h, h * 0.5).lerp(w, 0.3);
  h = torch::addcmul(h, x, w, 0.2).addcdiv(x, w.abs() + 1, -0.1);
  h = h.pow(2) / (1 + h.exp()) + h.sqrt().nan_to_num();
  auto half = h.to(torch::kBFloat16) * 2;
  return half.to(torch::kFloat).relu().sum();
}
}  // namespace

// The plan of three iterations of op_zoo's forward and backward with CPU plans (hot after 2).
std::shared_ptr<const hotpath::detail::Plan> op_zoo_plan() {
  torch::manual_seed(3);
  auto x = torch::randn({32, 64}, torch::requires_grad());
  auto w = torch::randn({32, 64}, torch::requires_grad());
  auto row = torch::randn({64});
  auto xt = torch::randn({64, 32});
  Enabled on(cpu_plans(2));
  for (int i = 0; i < 3; ++i) {
    op_zoo(x, w, row, xt).backward();
    hotpath::step();
  }
  return last_plan();
}

TEST_CASE("every generated kernel compiles with NVRTC", "[fusion][nvrtc]") {
  const auto plan = op_zoo_plan();
  REQUIRE(plan != nullptr);
  REQUIRE(plan->partition.groups.size() >= 2);
  const auto& g = *plan->graph;
  std::set<std::string> ops;
  int compiled = 0;
  for (const auto& grp : plan->partition.groups) {
    for (int n : grp.nodes) ops.insert(g.node(n).short_name());
    const auto spec = hotpath::detail::generate_kernel(g, grp);
    INFO(spec.source);
    const auto out = hotpath::detail::nvrtc_compile(spec.source, spec.name, 90,
                                                    hotpath::detail::runtime_headers(), "");
    CHECK(out.cubin.size() > 0);
    ++compiled;
  }
  INFO(plan->partition.to_text(g));
  CHECK(compiled >= 2);
  for (const char* op :
       {"gelu", "gelu_backward", "silu", "silu_backward", "sigmoid_backward", "softplus_backward",
        "addcmul", "where.self", "lerp.Scalar", "_to_copy", "mul.Tensor", "add.Tensor"}) {
    CAPTURE(op);
    CHECK(ops.count(op) == 1);
  }
}

// What the interpreter kernel must run for a group: each member as the form of its op, reading
// the registers of its operands, and the group's loads and stores.
void check_program(const hotpath::detail::Graph& g, const hotpath::detail::FusionGroup& grp,
                   const hotpath::detail::KernelSpec& spec) {
  using hotpath::detail::op_form_index;
  const hp::Program& p = spec.program;
  INFO(spec.source);
  // One instruction per node, in order, each after the casts of its operands that eager casts.
  std::size_t node = 0;
  for (int k = 0; k < p.code; ++k) {
    CHECK(p.instr[k].dst < hp::kProgramRegs);
    REQUIRE(node < grp.nodes.size());
    const auto& n = g.node(grp.nodes[node]);
    CAPTURE(k, n.short_name());
    if (p.instr[k].op == op_form_index(g, n)) {
      ++node;
      continue;
    }
    CHECK(hotpath::detail::op_forms()[static_cast<std::size_t>(p.instr[k].op)].key == "_to_copy");
    CHECK(p.instr[k].round != hp::kF32);
  }
  CHECK(node == grp.nodes.size());
  int loads = 0, stores = 0;
  for (const auto& a : spec.args) {
    if (a.kind != hotpath::detail::KernelArg::Kind::Tensor) continue;
    stores += a.written ? 1 : 0;
  }
  for (int k = 0; k < p.loads; ++k) {
    const auto& a = spec.args[p.load_slot[k]];
    CHECK(a.kind == hotpath::detail::KernelArg::Kind::Tensor);
    ++loads;
  }
  CHECK(loads == p.loads);
  CHECK(p.stores == stores);
  for (int k = 0; k < p.stores; ++k) CHECK(spec.args[p.store_slot[k]].written);
  CHECK(p.numel == spec.numel);
}

TEST_CASE("the interpreter kernel holds every op form and compiles with NVRTC", "[fusion][nvrtc]") {
  const std::string& src = hotpath::detail::interpreter_source();
  const auto& forms = hotpath::detail::op_forms();
  REQUIRE(forms.size() > 40);
  for (std::size_t i = 0; i < forms.size(); ++i) {
    CAPTURE(forms[i].key, forms[i].variant);
    CHECK(src.find("case " + std::to_string(i) + ":  // " + forms[i].key) != std::string::npos);
  }
  const auto out = hotpath::detail::nvrtc_compile(src, hotpath::detail::kInterpreterFunction, 90,
                                                  hotpath::detail::runtime_headers(), "");
  CHECK(out.cubin.size() > 0);
}

TEST_CASE("the build compiled the interpreter kernel into the prebuilt kernel directory",
          "[fusion][cache]") {
  using namespace hotpath::detail;
  REQUIRE_FALSE(prebuilt_kernel_dirs().empty());
  const std::string key = kernel_cache_key(interpreter_source(), 90);
  INFO("prebuilt: " << prebuilt_kernel_dirs().front() << "/" << key << ".cubin");
  // Found with no cache directory of its own: from the build tree's kernels.
  const auto cubin = KernelCache("").load(key);
  REQUIRE(cubin.has_value());
  CHECK(cubin->size() > 1000);
  // A user's cache directory does not hide it.
  hotpath_test::TempDir dir("hotpath-prebuilt-test");
  CHECK(KernelCache(dir.path()).load(key).has_value());
}

TEST_CASE("fusion groups become interpreter programs", "[fusion]") {
  SECTION("the optimizer groups of an MLP + AdamW step") {
    const auto plan = mlp_plan(5);
    REQUIRE(plan != nullptr);
    REQUIRE(plan->groups.size() >= 4);
    int optimizer_groups = 0;
    for (std::size_t k = 0; k < plan->partition.groups.size(); ++k) {
      const auto& spec = plan->groups[k].spec;
      INFO(plan->groups[k].name << ": " << spec.not_interpretable);
      if (plan->partition.groups[k].columns()) {  // the bias gradients: column kernels only
        CHECK(spec.not_interpretable == "a sum over columns");
        continue;
      }
      if (plan->partition.groups[k].total()) {  // the loss: a total kernel only
        CHECK(spec.not_interpretable == "a reduction to one value");
        CHECK(spec.fixed_blocks >= 1);
        continue;
      }
      if (plan->groups[k].name == "mse_loss_backward") {
        REQUIRE(spec.interpretable());
        check_program(*plan->graph, plan->partition.groups[k], spec);
        continue;
      }
      ++optimizer_groups;
      REQUIRE(spec.interpretable());
      check_program(*plan->graph, plan->partition.groups[k], spec);
      // AdamW: param, exp_avg, exp_avg_sq read with the gradient; those three and two values
      // nobody but hotpath may hold written.
      CHECK(spec.program.loads == 4);
      CHECK(spec.program.stores == 5);
    }
    CHECK(optimizer_groups == 4);
  }
  SECTION("the op zoo: gelu variants, clamp bounds, bf16 rounding; broadcasts are not") {
    const auto plan = op_zoo_plan();
    REQUIRE(plan != nullptr);
    const auto& g = *plan->graph;
    int interpretable = 0, broadcast = 0;
    bool rounds_bf16 = false;
    for (const auto& grp : plan->partition.groups) {
      const auto spec = hotpath::detail::generate_kernel(g, grp);
      if (!spec.interpretable()) {
        CHECK(spec.not_interpretable == "a strided or broadcast operand");
        ++broadcast;
        continue;
      }
      ++interpretable;
      check_program(g, grp, spec);
      for (int k = 0; k < spec.program.code; ++k)
        rounds_bf16 = rounds_bf16 || spec.program.instr[k].round == hp::kBF16;
    }
    CHECK(interpretable >= 2);
    CHECK(broadcast >= 1);  // x * w + row, xt.t()
    CHECK(rounds_bf16);
  }
  SECTION("an operand of another dtype is cast to the op's dtype first, as eager casts it") {
    using hotpath::detail::operand_rounding;
    torch::manual_seed(6);
    auto a = torch::randn({4, 8}).to(torch::kBFloat16);
    auto h = torch::randn({}).to(torch::kHalf);  // zero-dim: the bf16 tensor decides
    auto f = torch::randn({});
    auto w = torch::randn({4, 8});
    std::shared_ptr<const hotpath::detail::Plan> plan;
    {
      Enabled on(cpu_plans(2));
      for (int i = 0; i < 3; ++i) {
        auto y = (a * h + f).sigmoid();
        y.add_(w, 0.5);  // in place into bf16, computed in fp32: w is not rounded
        hotpath::step();
      }
      plan = last_plan();
    }
    REQUIRE(plan != nullptr);
    const auto& g = *plan->graph;
    REQUIRE(plan->partition.groups.size() == 1);
    const auto& grp = plan->partition.groups[0];
    std::map<std::string, std::vector<c10::ScalarType>> rounding;
    for (int n : grp.nodes) {
      const auto& node = g.node(n);
      rounding[node.short_name()] =
          operand_rounding(g, node, *hotpath::detail::find_pointwise(node));
    }
    using c10::ScalarType;
    CHECK(rounding["mul.Tensor"] ==
          std::vector<ScalarType>{ScalarType::Float, ScalarType::BFloat16});
    CHECK(rounding["add.Tensor"] ==
          std::vector<ScalarType>{ScalarType::Float, ScalarType::BFloat16});
    CHECK(rounding["sigmoid"] == std::vector<ScalarType>{ScalarType::Float});
    CHECK(rounding["add_.Tensor"] == std::vector<ScalarType>{ScalarType::Float, ScalarType::Float});
    const auto spec = hotpath::detail::generate_kernel(g, grp);
    INFO(spec.source);
    REQUIRE(spec.interpretable());
    check_program(g, grp, spec);
    CHECK(spec.program.code == static_cast<int>(grp.nodes.size()) + 2);  // h and f cast
    std::size_t casts = 0;
    for (std::size_t at = 0;
         (at = spec.source.find("hp::round_to<hp::bfloat16>(x", at)) != std::string::npos; ++at)
      ++casts;
    CHECK(casts == 2);
  }
}

// The kernel of a group compiles with NVRTC (sm_90); returns its spec.
// 8 iterations of `step` (which runs its backward and returns what to keep), each followed by
// an SGD update of `param` and hotpath::step(); under hotpath's CPU plans when `hot`. Returns
// what the steps kept, then the parameter.
std::vector<torch::Tensor> sgd_loop(bool hot, torch::Tensor param,
                                    const std::function<torch::Tensor()>& step) {
  std::unique_ptr<Enabled> on;
  if (hot) on = std::make_unique<Enabled>(cpu_plans(2));
  std::vector<torch::Tensor> out;
  for (int i = 0; i < 8; ++i) {
    out.push_back(step().detach().clone());
    {
      torch::NoGradGuard ng;
      param -= 0.1 * param.grad();
      param.grad().zero_();
    }
    hotpath::step();
  }
  on.reset();
  out.push_back(param.detach().clone());
  return out;
}

// The ops a group fuses, by short name.
std::set<std::string> op_names(const hotpath::detail::Graph& g,
                               const hotpath::detail::FusionGroup& grp) {
  std::set<std::string> ops;
  for (int n : grp.nodes) ops.insert(g.node(n).short_name());
  return ops;
}

// Metadata of a contiguous fp32 tensor on cuda:0, for traces written as CUDA records them.
hotpath::detail::TensorMeta cuda_meta(std::vector<std::int64_t> sizes) {
  hotpath::detail::TensorMeta m;
  m.defined = true;
  m.dtype = c10::ScalarType::Float;
  m.device = c10::Device(c10::kCUDA, 0);
  m.sizes.assign(sizes.begin(), sizes.end());
  m.strides.assign(sizes.size(), 1);
  for (std::size_t d = sizes.size() - 1; d-- > 0;) m.strides[d] = m.strides[d + 1] * sizes[d + 1];
  return m;
}

hotpath::detail::KernelSpec check_compiles(const hotpath::detail::Graph& g,
                                           const hotpath::detail::FusionGroup& grp) {
  auto spec = hotpath::detail::generate_kernel(g, grp);
  INFO(spec.source);
  // The kernel runs inside the last member's op, before its caller holds any of its outputs:
  // all of them are written (a skipped total_weight or weight gradient went unnoticed by the
  // per-launch verification, which compares what the kernel writes).
  for (const auto& a : spec.args) {
    if (a.kind != hotpath::detail::KernelArg::Kind::Tensor || a.output < 0) continue;
    CAPTURE(a.name, a.member, a.output);
    CHECK((a.optional == (a.member + 1 != static_cast<int>(grp.nodes.size()))));
  }
  CHECK(hotpath::detail::nvrtc_compile(spec.source, spec.name, 90,
                                       hotpath::detail::runtime_headers(), "")
            .cubin.size() > 0);
  return spec;
}

// A loop of `iterations` run without and with CPU plans (`loop(hot)` returns what it computed):
// every iteration after the signature turned hot ran the plan, none left it, and the results
// are identical to eager. Returns the plan of the loop's signature.
std::shared_ptr<const hotpath::detail::Plan> check_plan_is_eager(
    const std::function<std::vector<torch::Tensor>(bool)>& loop, int iterations) {
  const auto eager = loop(false);
  const auto fused = loop(true);
  const auto s = hotpath::stats().last();
  INFO(hotpath::format_stats(hotpath::stats()));
  CHECK(s.fusion.fused_iterations == iterations - s.hot_at_iteration);
  CHECK(s.fusion.divergences == 0);
  REQUIRE(fused.size() == eager.size());
  for (std::size_t i = 0; i < fused.size(); ++i) CHECK(torch::equal(fused[i], eager[i]));
  return last_plan();
}

// Reductions along the last dimension with pointwise work around them, forward and backward.
torch::Tensor row_zoo(const torch::Tensor& x, const torch::Tensor& w) {
  auto h = x * 0.5 + w;  // w: one row, broadcast
  auto p = torch::softmax(h, -1);
  auto l = torch::log_softmax(h * 2, -1);
  auto c = h - h.mean(-1, true);
  auto v = (c * c).sum(-1, true);
  return ((p * l).sum() + (v * 0.1).sum()) * 0.5;  // a 0-dim group: add, mul
}

std::vector<torch::Tensor> train_rows(bool hot, int iterations) {
  torch::manual_seed(11);
  auto x = torch::randn({8, 32}, torch::requires_grad());
  auto w = torch::randn({32});
  std::unique_ptr<Enabled> on;
  if (hot) on = std::make_unique<Enabled>(cpu_plans(2));
  std::vector<torch::Tensor> out;
  for (int i = 0; i < iterations; ++i) {
    auto loss = row_zoo(x, w);
    loss.backward();
    {
      torch::NoGradGuard ng;
      x -= 0.1 * x.grad();
      x.grad().zero_();
    }
    out.push_back(loss.detach().clone());
    hotpath::step();
  }
  on.reset();  // before the ops below, which are no iteration of the loop
  out.push_back(x.detach().clone());
  return out;
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

// Sums over the first dimension (a bias's gradient) with the pointwise work before them.
std::vector<torch::Tensor> column_sums(bool hot) {
  torch::manual_seed(6);
  auto x = torch::randn({16, 40});  // 40 columns: two tiles of 32, the second partly empty
  auto b = torch::randn({40});
  auto tall = torch::randn({hotpath::detail::kMaxColumnRows + 1, 2});
  std::unique_ptr<Enabled> on;
  if (hot) on = std::make_unique<Enabled>(cpu_plans(2));
  std::vector<torch::Tensor> out;
  for (int i = 0; i < 4; ++i) {
    x.normal_();
    auto g = torch::gelu(x * 0.5 + b);
    auto s = g.sum(0);                             // with the pointwise ops before it
    auto k = (g * g).sum(0, true);                 // keepdim: one row
    auto r = x / k;                                // reads a sum: not in the sum's kernel
    auto h = (x.to(torch::kBFloat16) * 2).sum(0);  // bf16, summed in fp32
    auto t = tall.sum(0);                          // chunks of rows, added up in order
    for (const auto& v : {g, s, k, r, h, t}) out.push_back(v.clone());
    hotpath::step();
  }
  return out;
}

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

TEST_CASE("an output slot gives its buffer again once nobody holds it", "[fusion][slots]") {
  using hotpath::detail::OutputSlot;
  hotpath::detail::TensorMeta m;
  m.defined = true;
  m.dtype = c10::ScalarType::Float;
  m.device = c10::Device(c10::kCPU);
  m.sizes = {8, 4};
  m.strides = {1, 8};  // transposed: the buffer holds all 32 elements either way
  c10::intrusive_ptr<OutputSlot> slot;
  auto a = OutputSlot::make(slot, m);
  REQUIRE(slot);
  CHECK(a.sizes() == c10::IntArrayRef({8, 4}));
  CHECK(a.strides() == c10::IntArrayRef({1, 8}));
  CHECK(a.scalar_type() == torch::kFloat);
  CHECK(a.storage().nbytes() == 32 * sizeof(float));
  void* const buffer = a.data_ptr();
  auto held = OutputSlot::make(slot, m);  // `a` still holds the buffer: another one
  CHECK(held.data_ptr() != buffer);
  a = torch::Tensor();
  auto b = OutputSlot::make(slot, m);
  CHECK(b.data_ptr() == buffer);
  auto view = b.t();  // a view keeps the storage, and so the buffer
  b = torch::Tensor();
  CHECK(OutputSlot::make(slot, m).data_ptr() != buffer);
  view = torch::Tensor();
  auto c = OutputSlot::make(slot, m);
  CHECK(c.data_ptr() == buffer);
  // The buffer outlives the slot while a tensor uses it.
  slot.reset();
  c.fill_(2.0);
  CHECK(c.sum().item<double>() == 64.0);
  c = torch::Tensor();
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

TEST_CASE("the kernel cache: miss, hit, corrupt entry", "[fusion][cache]") {
  const hotpath_test::TempDir tmp("hotpath-cache-test");
  const std::string dir = tmp.path() + "/nested";
  hotpath::detail::KernelCache cache(dir);
  const std::string key = hotpath::detail::kernel_cache_key("source", 90);
  CHECK(key != hotpath::detail::kernel_cache_key("source", 80));
  CHECK(key != hotpath::detail::kernel_cache_key("source2", 90));
  CHECK_FALSE(cache.load(key).has_value());
  cache.store(key, std::string("\x7f"
                               "ELF cubin bytes",
                               16));
  REQUIRE(cache.load(key).has_value());
  CHECK(*cache.load(key) == std::string("\x7f"
                                        "ELF cubin bytes",
                                        16));
  {
    std::fstream f(cache.path(key), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f << "XYZ";  // damage the payload
  }
  CHECK_FALSE(cache.load(key).has_value());
  cache.store(key, "recompiled");
  CHECK(cache.load(key).value() == "recompiled");
}

TEST_CASE("a plan's kernels build in parallel, from the cache the second time", "[fusion][nvrtc]") {
  using namespace hotpath::detail;
  const hotpath_test::TempDir tmp("hotpath-builder-test");
  const KernelCache cache(tmp.path());
  auto job = [](const std::string& name, const std::string& body) {
    const std::string source =
        "extern \"C\" __global__ void " + name + "(float* x) { " + body + " }\n";
    return KernelJob{source, name, kernel_cache_key(source, 90)};
  };
  const std::vector<KernelJob> jobs = {job("k_double", "x[threadIdx.x] *= 2.0f;"),
                                       job("k_broken", "x[threadIdx.x] = undeclared;"),
                                       job("k_half", "x[threadIdx.x] *= 0.5f;")};
  {
    KernelBuilder b(jobs, 90, runtime_headers(), cache);
    CHECK(b.compiled() == 3);
    b.compile_here();
    for (std::size_t k : {0, 2}) {
      CAPTURE(k);
      CHECK(b.wait(k).error.empty());
      CHECK_FALSE(b.wait(k).from_cache);
      CHECK(b.wait(k).cubin.size() > 100);
    }
    CHECK(b.wait(1).error.find("undeclared") != std::string::npos);  // the others built anyway
  }
  KernelBuilder again(jobs, 90, runtime_headers(), cache);
  CHECK(again.compiled() == 1);  // only the broken one is not in the cache
  again.compile_here();
  CHECK(again.wait(0).from_cache);
  CHECK(again.wait(2).from_cache);
  CHECK_FALSE(again.wait(1).error.empty());
  const BuiltKernel one = load_or_compile(jobs[0], 90, runtime_headers(), cache);
  CHECK(one.from_cache);
  CHECK(one.cubin == again.wait(0).cubin);
}

TEST_CASE("an NVRTC failure names the error and the dumped source", "[fusion][nvrtc]") {
  const hotpath_test::TempDir tmp("hotpath-dump-test");
  const std::string dir = tmp.path();
  const std::string dumped = dir + "/broken.cu";
  try {
    hotpath::detail::nvrtc_compile("extern \"C\" __global__ void k() { undefined_thing(); }",
                                   "broken", 90, {}, dir);
    FAIL("no error");
  } catch (const hotpath::Error& e) {
    const std::string msg = e.what();
    CHECK(msg.find("undefined_thing") != std::string::npos);
    CHECK(msg.find(dumped) != std::string::npos);
    CHECK(msg.find("nvrtc.cpp:") != std::string::npos);
  }
  CHECK(std::ifstream(dumped).good());
  std::remove(dumped.c_str());
  ::rmdir(dir.c_str());
}

namespace {
// Host memory the process holds (resident set), in bytes.
std::int64_t resident_bytes() {
  std::ifstream f("/proc/self/statm");
  std::int64_t pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * static_cast<std::int64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace

TEST_CASE("out of memory for a fused output leaves that iteration to eager", "[fusion][faults]") {
  const auto eager = train_mlp(false, 14);
  std::vector<torch::Tensor> fused;
  {
    hotpath_test::EnvVar faults("HOTPATH_FAULTS",
                                "oom");  // every deferred output's allocation fails
    fused = train_mlp(true, 14);
    const auto s = hotpath::stats().last();
    INFO(hotpath::format_stats(hotpath::stats()));
    CHECK(s.fusion.fused_iterations == 0);
    CHECK(s.fusion.divergences >= 10);  // every iteration the plan armed for
  }
  hotpath::disable_hot_path_detection();
  REQUIRE(fused.size() == eager.size());
  for (std::size_t i = 0; i < eager.size(); ++i) CHECK(torch::equal(fused[i], eager[i]));
}

TEST_CASE("an unknown injected fault is refused by name", "[fusion][faults]") {
  hotpath_test::EnvVar faults("HOTPATH_FAULTS", "nvrtc,disk");
  hotpath::disable_hot_path_detection();
  CHECK_THROWS_WITH(hotpath::enable_hot_path_detection(3),
                    Catch::Contains("HOTPATH_FAULTS='nvrtc,disk': unknown fault 'disk'"));
}

TEST_CASE("two threads train two models at once, each with its own plans", "[fusion][threads]") {
  const auto eager = train_mlp(false, 20);
  // Both models are made here: the global generator is one, and two threads seeding and drawing
  // from it at once interleave their draws (on a 16-core machine the models differed).
  auto build = [] {
    torch::manual_seed(7);
    return std::make_unique<Mlp>();
  };
  auto ma = build(), mb = build();
  std::vector<torch::Tensor> a, b;
  std::int64_t fused_a = 0, fused_b = 0;
  auto worker = [](Mlp& m, std::vector<torch::Tensor>& out, std::int64_t& fused) {
    {
      Enabled on(cpu_plans(3));
      for (int i = 0; i < 20; ++i) {
        m.train_step(i);
        hotpath::step();
      }
      fused = hotpath::stats().last().fusion.fused_iterations;
    }
    out = m.params();
  };
  std::thread t1(worker, std::ref(*ma), std::ref(a), std::ref(fused_a));
  std::thread t2(worker, std::ref(*mb), std::ref(b), std::ref(fused_b));
  t1.join();
  t2.join();
  CHECK(fused_a >= 15);
  CHECK(fused_b >= 15);
  for (std::size_t i = 0; i < eager.size(); ++i) {
    CHECK(torch::equal(a[i], eager[i]));
    CHECK(torch::equal(b[i], eager[i]));
  }
}

TEST_CASE("a long run keeps its host memory", "[fusion][memory]") {
  torch::manual_seed(7);
  Mlp mlp;
  Enabled on(cpu_plans(3));
  for (int i = 0; i < 300; ++i) {
    mlp.train_step(i);
    hotpath::step();
  }
  const std::int64_t before = resident_bytes();
  for (int i = 300; i < 3300; ++i) {
    mlp.train_step(i);
    hotpath::step();
  }
  const std::int64_t after = resident_bytes();
  const auto s = hotpath::stats().last();
  CHECK(s.fusion.fused_iterations >= 3290);
  CAPTURE(before, after);
  // 3000 more iterations: nothing kept per iteration (a record, a tensor or a plan each would
  // be megabytes by now).
  CHECK(after - before < 4 * 1024 * 1024);
}

TEST_CASE("the kernel cache: a missing, read-only or truncated directory", "[fusion][cache]") {
  const hotpath_test::TempDir tmp("hotpath-cache-faults");
  const std::string key = hotpath::detail::kernel_cache_key("source", 90);
  // Missing: made on the first store, nested.
  hotpath::detail::KernelCache missing(tmp.path() + "/a/b/c");
  CHECK_FALSE(missing.load(key).has_value());
  missing.store(key, "cubin");
  CHECK(missing.load(key).value() == "cubin");
  // Truncated entries (a crash mid-write) are misses, never loaded.
  {
    std::ifstream in(missing.path(key), std::ios::binary);
    std::string whole((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (std::size_t cut : {std::size_t{0}, std::size_t{3}, whole.size() - 1}) {
      std::ofstream(missing.path(key), std::ios::binary | std::ios::trunc) << whole.substr(0, cut);
      CAPTURE(cut);
      CHECK_FALSE(missing.load(key).has_value());
    }
  }
  // Read-only: storing fails quietly (a recompile next run), loading misses.
  if (geteuid() != 0) {  // root writes anyway
    const std::string ro = tmp.path() + "/ro";
    ::mkdir(ro.c_str(), 0555);
    hotpath::detail::KernelCache cache(ro);
    CHECK_NOTHROW(cache.store(key, "cubin"));
    CHECK_FALSE(cache.load(key).has_value());
  }
  // A path that is a file, not a directory: the same.
  const std::string file = tmp.path() + "/file";
  std::ofstream(file) << "x";
  hotpath::detail::KernelCache not_dir(file);
  CHECK_NOTHROW(not_dir.store(key, "cubin"));
  CHECK_FALSE(not_dir.load(key).has_value());
}
