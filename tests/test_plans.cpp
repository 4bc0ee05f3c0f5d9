// Plans on CPU (Config::fuse_cpu: fused groups run through the executor's eager
// materialisation, so every result must be bitwise identical to plain eager): guards, pauses,
// divergence, batches, output slots, faults, threads and memory; and the MLP's plans on a GPU.
#include "compile/worker.h"
#include "fusion_support.h"
#include "have_gpu.h"

using namespace fusion_test;

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
  // reused for temporaries, kernels compiled in one NVRTC program. On the GPU machine
  // (gpu_check.sh).
  if (!hotpath_test::have_gpu()) return;
  hotpath_test::TempDir cache("hotpath-gpu-test");
  hotpath::Stats stats;
  auto train = [&](bool hot) {
    torch::manual_seed(7);
    torch::nn::Sequential model(torch::nn::Linear(64, 256), torch::nn::GELU(),
                                torch::nn::Linear(256, 64));
    model->to(torch::kCUDA);
    torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-2));
    auto x = torch::randn({32, 64}, torch::kCUDA), y = torch::randn({32, 64}, torch::kCUDA);
    std::unique_ptr<Enabled> on;
    if (hot) on = std::make_unique<Enabled>(gpu_plans(cache.path()));
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
  check_params_close(fused, eager, 1e-4);  // after 40 AdamW steps; each kernel to ~1e-7
}

TEST_CASE("on a GPU, norms and cross-entropy train as eager does", "[fusion][gpu]") {
  // LayerNorm -> Linear -> LayerNorm -> GELU -> rms_norm -> Linear -> cross-entropy (ignore_index
  // targets), plain SGD: the norms' backward (column blocks; the first norm's input needs no
  // gradient), nll_loss's forward (a sum across blocks) and backward (the target's column) on
  // their own kernels. On the GPU machine (gpu_check.sh).
  if (!hotpath_test::have_gpu()) return;
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
    std::unique_ptr<Enabled> on;
    if (hot) on = std::make_unique<Enabled>(gpu_plans(cache.path(), /*verify=*/true));
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
  check_params_close(fused, eager, 1e-4);  // after 40 SGD steps; each kernel to ~1e-7
}

TEST_CASE("on a GPU, Linear layers over [B, T, C] train as eager does", "[fusion][gpu][columns]") {
  // The bias gradients are sums over B and T (column kernels over B x T rows, with the GELU
  // backward before them), every launch verified against eager; SGD over 40 steps.
  if (!hotpath_test::have_gpu()) return;
  hotpath_test::TempDir cache("hotpath-gpu-test-leading-sums");
  hotpath::Stats stats;
  auto train = [&](bool hot) {
    torch::manual_seed(12);
    torch::nn::Linear l1(48, 96), l2(96, 40);
    l1->to(torch::kCUDA);
    l2->to(torch::kCUDA);
    std::vector<torch::Tensor> params = l1->parameters();
    for (const auto& t : l2->parameters()) params.push_back(t);
    torch::optim::SGD opt(params, torch::optim::SGDOptions(0.05));
    auto x = torch::randn({4, 300, 48}, torch::kCUDA);  // 1200 rows: beyond one chunk's worth
    auto y = torch::randn({4, 300, 40}, torch::kCUDA);
    std::unique_ptr<Enabled> on;
    if (hot) on = std::make_unique<Enabled>(gpu_plans(cache.path(), /*verify=*/true));
    for (int i = 0; i < 40; ++i) {
      opt.zero_grad();
      torch::mse_loss(l2->forward(torch::gelu(l1->forward(x))), y).backward();
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
  int sums = 0;
  for (const auto& g : s.fusion.groups) {
    CAPTURE(g.name, g.checks, g.max_rel_error);
    CHECK(g.error.empty());
    CHECK(g.checks == g.launches);
    CHECK(g.max_rel_error <= 1e-5);
    if (g.name.find("sum") != std::string::npos && g.launches >= 35) ++sums;
  }
  CHECK(sums >= 2);                        // both biases' gradients on their own kernels
  check_params_close(fused, eager, 1e-4);  // after 40 SGD steps; each kernel to ~1e-7
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
  // One-time work in the background is done before the first reading: on a machine with a GPU
  // the compile worker loads the interpreter kernel (a CUDA context, NVRTC: tens of MB), which
  // under a busy ctest finished after iteration 300 and read as 38 MB of growth.
  hotpath::wait_for_compilation();
  hotpath::detail::CompileWorker::side().drain();
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

TEST_CASE("a plan keeps buffers for its smallest temporaries within its budget",
          "[plans][memory]") {
  // Temporaries of 4 KiB and of 96 MiB: the small ones and two large ones fit the 256 MiB, the
  // third large one comes from the allocator in each iteration, as eager's does.
  auto small = torch::randn({1024});
  auto big = torch::randn({24 * 1024 * 1024});
  Enabled on(cpu_plans(2));
  for (int i = 0; i < 3; ++i) {
    auto s = ((small * 2).sigmoid() * 3).sum();
    auto b = (((big * 2).sigmoid() * 3).tanh() * 4).sum();
    hotpath::step();
  }
  const auto plan = last_plan();
  REQUIRE(plan != nullptr);
  std::int64_t held = 0;
  int small_held = 0, big_held = 0, big_not = 0;
  for (const auto& op : plan->ops) {
    for (std::size_t k = 0; k < op.outs.size(); ++k) {
      if (!op.temporary[k]) continue;
      const std::int64_t bytes = op.outs[k].numel() * 4;
      if (op.slotted[k]) held += bytes;
      if (bytes <= 4096) small_held += op.slotted[k] ? 1 : 0;
      if (bytes > 4096) (op.slotted[k] ? big_held : big_not) += 1;
    }
  }
  CHECK(held <= hotpath::detail::kSlotBudgetBytes);
  CHECK(small_held == 3);  // the product, the sigmoid, the second product
  CHECK(big_held == 2);
  CHECK(big_not >= 2);
}
