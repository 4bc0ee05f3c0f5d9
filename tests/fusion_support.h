// Shared helpers of the fusion tests (test_plans.cpp, test_codegen.cpp, test_compile.cpp): CPU
// plans on, the last plan, goldens, the small MLP + AdamW, the op zoo, checks of a group's
// program and kernel.
#pragma once

#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
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
#include "fusion/op_table.h"
#include "fusion/partition.h"
#include "hotpath/hotpath.h"
#include "ir/graph.h"
#include "session/session.h"
#include "temp_dir.h"

namespace fusion_test {

inline hotpath::Config cpu_plans(int threshold) {
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

// As cpu_plans(3), for tests on the GPU: the groups' own kernels, compiled into `cache` (a test's
// TempDir); `verify`: every launch checked against eager on its inputs, outputs poisoned first.
inline hotpath::Config gpu_plans(const std::string& cache, bool verify = false) {
  hotpath::Config c = cpu_plans(3);
  c.fuse_cpu = false;
  c.cache_dir = cache;
  c.verify = verify;
  return c;
}

// Parameters trained with hotpath against eager's: each within `tol`, relative by norm.
inline void check_params_close(const std::vector<torch::Tensor>& fused,
                               const std::vector<torch::Tensor>& eager, double tol) {
  REQUIRE(fused.size() == eager.size());
  for (std::size_t i = 0; i < fused.size(); ++i) {
    const double err = ((fused[i] - eager[i]).norm() / eager[i].norm()).item<double>();
    CAPTURE(i, err);
    CHECK(err <= tol);
  }
}

struct Enabled {
  explicit Enabled(const hotpath::Config& c) {
    hotpath::disable_hot_path_detection();
    hotpath::enable_hot_path_detection(c);
  }
  ~Enabled() { hotpath::disable_hot_path_detection(); }
};

inline std::shared_ptr<const hotpath::detail::Plan> last_plan() {
  auto session = hotpath::detail::thread_session();
  REQUIRE(session != nullptr);
  return session->executor.plan(hotpath::stats().last_signature);
}

// tests/golden in the source tree (golden_dir.cpp: the one translation unit that carries the
// absolute path, so the others' compiler caches hit from any checkout).
std::string golden_dir();

// Compares `text` with tests/golden/<name>; HOTPATH_UPDATE_GOLDEN=1 rewrites the file.
inline void check_golden(const std::string& name, const std::string& text) {
  const std::string path = golden_dir() + "/" + name;
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

inline std::vector<torch::Tensor> train_mlp(bool hot, int iterations) {
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

// The plan of the small MLP + AdamW step after `iterations` steps with CPU plans (hot after 3).
inline std::shared_ptr<const hotpath::detail::Plan> mlp_plan(int iterations) {
  torch::manual_seed(7);
  Mlp mlp;
  Enabled on(cpu_plans(3));
  for (int i = 0; i < iterations; ++i) {
    mlp.train_step(i);
    hotpath::step();
  }
  return last_plan();
}

// The GPU plan's batches, decided for the groups of a CPU plan as if they ran on a GPU.
inline std::vector<std::vector<int>> gpu_batches(
    const hotpath::detail::Plan& cpu, hotpath::detail::Plan& plan,
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

// Many fusable ops, forward and backward, casts, broadcasting, transposed and 0-dim operands.
inline torch::Tensor op_zoo(const torch::Tensor& x, const torch::Tensor& w,
                            const torch::Tensor& row, const torch::Tensor& xt) {
  auto h = torch::gelu(x * w + row, "tanh") + torch::gelu(x, "none");
  h = torch::silu(h) * torch::sigmoid(x) - torch::tanh(xt).t();
  h = torch::softplus(h, 2.0, 10.0).clamp(-3.0, 3.0);
  h = torch::where(x > 0, h, h * 0.5).lerp(w, 0.3);
  h = torch::addcmul(h, x, w, 0.2).addcdiv(x, w.abs() + 1, -0.1);
  h = h.pow(2) / (1 + h.exp()) + h.sqrt().nan_to_num();
  auto half = h.to(torch::kBFloat16) * 2;
  return half.to(torch::kFloat).relu().sum();
}

// The plan of three iterations of op_zoo's forward and backward with CPU plans (hot after 2).
inline std::shared_ptr<const hotpath::detail::Plan> op_zoo_plan() {
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

// What the interpreter kernel must run for a group: each member as the form of its op, reading
// the registers of its operands, and the group's loads and stores.
inline void check_program(const hotpath::detail::Graph& g, const hotpath::detail::FusionGroup& grp,
                          const hotpath::detail::KernelSpec& spec) {
  using hotpath::detail::op_form_index;
  const hp::Program& p = spec.program;
  INFO(spec.source);
  // One instruction per node, in order, each after the casts of its operands that eager casts.
  std::size_t node = 0;
  for (int k = 0; k < p.code; ++k) {
    CHECK(p.instr[k].dst < p.regs);
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
  // Registers of the interpreter's file, reused once read for the last time.
  CHECK(p.regs >= 1);
  CHECK(p.regs <= hp::kProgramFile);
  for (int k = 0; k < p.loads; ++k) CHECK(p.load_reg[k] < p.regs);
  for (int k = 0; k < p.stores; ++k) CHECK(p.store_reg[k] < p.regs);
  CHECK(p.stores == stores);
  for (int k = 0; k < p.stores; ++k) CHECK(spec.args[p.store_slot[k]].written);
  CHECK(p.numel == spec.numel);
}

// The kernel of a group compiles with NVRTC (sm_90); returns its spec.
// 8 iterations of `step` (which runs its backward and returns what to keep), each followed by
// an SGD update of `param` and hotpath::step(); under hotpath's CPU plans when `hot`. Returns
// what the steps kept, then the parameter.
inline std::vector<torch::Tensor> sgd_loop(bool hot, torch::Tensor param,
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
inline std::set<std::string> op_names(const hotpath::detail::Graph& g,
                                      const hotpath::detail::FusionGroup& grp) {
  std::set<std::string> ops;
  for (int n : grp.nodes) ops.insert(g.node(n).short_name());
  return ops;
}

// Metadata of a contiguous fp32 tensor on cuda:0, for traces written as CUDA records them.
inline hotpath::detail::TensorMeta cuda_meta(std::vector<std::int64_t> sizes) {
  hotpath::detail::TensorMeta m;
  m.defined = true;
  m.dtype = c10::ScalarType::Float;
  m.device = c10::Device(c10::kCUDA, 0);
  m.sizes.assign(sizes.begin(), sizes.end());
  m.strides.assign(sizes.size(), 1);
  for (std::size_t d = sizes.size() - 1; d-- > 0;) m.strides[d] = m.strides[d + 1] * sizes[d + 1];
  return m;
}

inline hotpath::detail::KernelSpec check_compiles(const hotpath::detail::Graph& g,
                                                  const hotpath::detail::FusionGroup& grp) {
  auto spec = hotpath::detail::generate_kernel(g, grp);
  INFO(spec.source);
  // The kernel runs inside the last member's op, before its caller holds any of its outputs:
  // all of them are written (a skipped total_weight or weight gradient went unnoticed by the
  // per-launch verification, which compares what the kernel writes), and so is an earlier
  // member's output that the last one writes in place (add_ into a product).
  for (const auto& a : spec.args) {
    if (a.kind != hotpath::detail::KernelArg::Kind::Tensor || a.output < 0) continue;
    CAPTURE(a.name, a.member, a.output);
    const int v = g.node(grp.nodes[static_cast<std::size_t>(a.member)])
                      .outputs[static_cast<std::size_t>(a.output)];
    CHECK(a.optional == !hotpath::detail::made_by_last(g, grp, g.value(v).tensor));
  }
  CHECK(hotpath::detail::nvrtc_compile(spec.source, spec.name, 90,
                                       hotpath::detail::runtime_headers(), "")
            .cubin.size() > 0);
  return spec;
}

// A loop of `iterations` run without and with CPU plans (`loop(hot)` returns what it computed):
// every iteration after the signature turned hot ran the plan, none left it, and the results
// are identical to eager. Returns the plan of the loop's signature.
inline std::shared_ptr<const hotpath::detail::Plan> check_plan_is_eager(
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
inline torch::Tensor row_zoo(const torch::Tensor& x, const torch::Tensor& w) {
  auto h = x * 0.5 + w;  // w: one row, broadcast
  auto p = torch::softmax(h, -1);
  auto l = torch::log_softmax(h * 2, -1);
  auto c = h - h.mean(-1, true);
  auto v = (c * c).sum(-1, true);
  return ((p * l).sum() + (v * 0.1).sum()) * 0.5;  // a 0-dim group: add, mul
}

inline std::vector<torch::Tensor> train_rows(bool hot, int iterations) {
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

// Sums over the first dimension (a bias's gradient) with the pointwise work before them.
inline std::vector<torch::Tensor> column_sums(bool hot) {
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

// Host memory the process holds (resident set), in bytes.
inline std::int64_t resident_bytes() {
  std::ifstream f("/proc/self/statm");
  std::int64_t pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * static_cast<std::int64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace fusion_test
