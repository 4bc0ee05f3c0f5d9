// Interception, iterations, signatures and hot detection on real LibTorch loops (CPU tensors).
#include <ATen/ThreadLocalState.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include "dispatch/hook_key.h"
#include "hotpath/hotpath.h"
#include "session/session.h"

namespace {

// Fresh detection state for one test; disabled again on exit.
struct Enabled {
  explicit Enabled(int threshold) {
    hotpath::disable_hot_path_detection();
    hotpath::enable_hot_path_detection(threshold);
  }
  Enabled(const hotpath::Config& c) {
    hotpath::disable_hot_path_detection();
    hotpath::enable_hot_path_detection(c);
  }
  ~Enabled() { hotpath::disable_hot_path_detection(); }
};

struct Mlp {
  torch::nn::Sequential model;
  torch::optim::AdamW opt;
  torch::Tensor x, y;
  explicit Mlp(int64_t batch = 8, int64_t dim = 16, int64_t hidden = 32)
      : model(torch::nn::Linear(dim, hidden), torch::nn::GELU(), torch::nn::Linear(hidden, dim)),
        opt(model->parameters(), torch::optim::AdamWOptions(1e-3)),
        x(torch::randn({batch, dim})),
        y(torch::randn({batch, dim})) {}
  void train_step() {
    opt.zero_grad();
    auto loss = torch::mse_loss(model->forward(x), y);
    loss.backward();
    opt.step();
  }
};

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace

TEST_CASE("a signature is hot exactly after N iterations", "[detect]") {
  auto a = torch::randn({4, 8});
  auto b = torch::randn({4, 8});
  Enabled on(5);
  for (int i = 1; i <= 4; ++i) {
    auto c = (a * b).relu().sum();
    hotpath::step();
    CHECK(hotpath::stats().hot_signatures() == 0);
  }
  auto c = (a * b).relu().sum();
  hotpath::step();
  const auto s = hotpath::stats();
  REQUIRE(s.signatures.size() == 1);
  CHECK(s.signatures[0].hot);
  CHECK(s.signatures[0].count == 5);
  CHECK(s.signatures[0].hot_at_iteration == 5);
  CHECK(s.signatures[0].ops_per_iteration == 3);
  CHECK(s.boundaries == hotpath::BoundaryMode::Explicit);
  CHECK(s.signatures[0].op_names ==
        std::vector<std::string>{"aten::mul.Tensor", "aten::relu", "aten::sum"});
}

TEST_CASE("a shape or dtype change gives a new signature; a scalar change does not", "[detect]") {
  const auto x = torch::randn({4, 8}), x64 = torch::randn({4, 8}, torch::kFloat64);
  const auto wide = torch::randn({4, 9}), tall = torch::randn({8, 4});
  Enabled on(100);
  auto run = [](const torch::Tensor& a, double alpha) {
    auto r = (a.mul(alpha) + 1.5).tanh();
    hotpath::step();
    return hotpath::stats().last_signature;
  };
  const auto base = run(x, 0.5);
  CHECK(run(x, 0.5) == base);
  CHECK(run(x, 7.25) == base);    // scalar value only
  CHECK(run(wide, 0.5) != base);  // shape
  CHECK(run(x64, 0.5) != base);   // dtype
  const auto transposed = tall.t();
  CHECK(run(transposed, 0.5) != base);  // strides
}

TEST_CASE("data flow between ops is part of the signature", "[detect]") {
  auto a = torch::randn({16});
  auto b = torch::randn({16});
  Enabled on(100);
  auto r1 = (a * b) + a;
  hotpath::step();
  const auto s1 = hotpath::stats().last_signature;
  auto r2 = (a * b) + b;  // same ops and shapes, the add reads the other input
  hotpath::step();
  CHECK(hotpath::stats().last_signature != s1);
  auto r3 = (a * b) + a;
  hotpath::step();
  CHECK(hotpath::stats().last_signature == s1);
}

TEST_CASE("forward, backward and optimizer ops are all seen", "[detect]") {
  Mlp mlp;
  Enabled on(3);
  for (int i = 0; i < 6; ++i) {
    mlp.train_step();
    hotpath::step();
  }
  const auto s = hotpath::stats();
  const auto last = s.last();
  CHECK(last.hot);
  const auto& ops = last.op_names;
  CHECK(contains(ops, "aten::addmm"));  // forward
  CHECK(contains(ops, "aten::gelu"));
  CHECK(contains(ops, "aten::mse_loss"));
  CHECK(contains(ops, "aten::mse_loss_backward"));  // autograd engine
  CHECK(contains(ops, "aten::gelu_backward"));
  CHECK(contains(ops, "aten::mm"));
  CHECK(contains(ops, "aten::addcdiv_"));  // AdamW
  CHECK((contains(ops, "aten::lerp_") || contains(ops, "aten::add_.Tensor")));
  // Only top-level ops: mse_loss's kernel calls mean/sub internally; those are not recorded.
  CHECK(std::count(ops.begin(), ops.end(), "aten::mse_loss") == 1);
  // The first iteration (optimizer state creation) differs from the steady ones.
  CHECK(s.signatures.size() == 2);
  CHECK(s.signatures[0].count == 1);
  CHECK(s.signatures[1].count == 5);
}

TEST_CASE("the host profile splits an op's time between the hook and ATen below it", "[detect]") {
  Mlp mlp;
  SECTION("off by default: nothing is timed") {
    Enabled on(3);
    for (int i = 0; i < 4; ++i) mlp.train_step();
    const auto s = hotpath::stats();
    CHECK(s.ops_seen > 0);
    CHECK(s.host_ops == 0);
    CHECK(s.host_hook_us == 0);
    CHECK(hotpath::format_stats(s).find("host:") == std::string::npos);
  }
  SECTION("on: every op the hook saw, on the autograd threads too") {
    hotpath::Config c;
    c.threshold = 3;
    c.host_profile = true;
    Enabled on(c);
    for (int i = 0; i < 4; ++i) {
      mlp.train_step();
      hotpath::step();
    }
    const auto s = hotpath::stats();
    CHECK(s.ops_seen > 0);
    CHECK(s.host_ops >= s.ops_seen);  // and the ops it ran eagerly without recording them
    // Eager ops (no plans on the CPU here) run below the hook: most of their time is ATen's.
    CHECK(s.host_below_us > 0);
    CHECK(s.host_hook_us > 0);
    CHECK(hotpath::format_stats(s).find(" us an op in hotpath's hook") != std::string::npos);
  }
}

TEST_CASE("an unmarked training loop's steps are found at its forward passes", "[detect]") {
  Mlp mlp;
  std::int64_t ops_per_iteration = 0;
  {
    Enabled on(3);
    for (int i = 0; i < 4; ++i) {
      mlp.train_step();
      hotpath::step();
    }
    ops_per_iteration = hotpath::stats().last().ops_per_iteration;
  }
  REQUIRE(ops_per_iteration > 20);
  hotpath::Config c;
  c.threshold = 10;
  c.stand_aside = false;  // on the CPU nothing fuses: hotpath would stand aside after 30
  Enabled on(c);
  for (int i = 0; i < 40; ++i) mlp.train_step();  // no markers at all
  const auto s = hotpath::stats();
  CHECK(s.boundaries == hotpath::BoundaryMode::Auto);
  CHECK(s.passes_per_step == 1);
  REQUIRE(s.hot_signatures() == 1);
  const auto hot =
      std::find_if(s.signatures.begin(), s.signatures.end(), [](auto& x) { return x.hot; });
  CHECK(hot->ops_per_iteration == ops_per_iteration);
  // Iterations before the lock are counted too; at most the one in progress is missing.
  CHECK(hot->count >= 38);
  // The iteration starts where the loop body does: its first op is the forward's first op.
  CHECK(hot->op_names.front() == "aten::t");
}

TEST_CASE("gradient accumulation's micro-batches and their update are one step", "[detect]") {
  // Three micro-batches, a forward and backward each, then one update: SGD's through p.data()
  // (an alias of the parameter), AdamW's on the parameter itself.
  for (const bool sgd : {true, false}) {
    Mlp mlp;
    std::unique_ptr<torch::optim::Optimizer> opt;
    if (sgd)
      opt = std::make_unique<torch::optim::SGD>(mlp.model->parameters(),
                                                torch::optim::SGDOptions(0.01).momentum(0.9));
    else
      opt = std::make_unique<torch::optim::AdamW>(mlp.model->parameters(),
                                                  torch::optim::AdamWOptions(1e-3));
    hotpath::Config c;
    c.threshold = 5;
    c.log_level = hotpath::LogLevel::Warn;
    c.stand_aside = false;  // on the CPU nothing fuses; this is about finding the step
    Enabled on(c);
    for (int step = 0; step < 20; ++step) {
      opt->zero_grad();
      for (int k = 0; k < 3; ++k) {
        auto x = mlp.x.narrow(0, 2 * k, 2), y = mlp.y.narrow(0, 2 * k, 2);
        (torch::mse_loss(mlp.model->forward(x), y) / 3).backward();
      }
      opt->step();
    }
    const auto s = hotpath::stats();
    INFO((sgd ? "SGD: " : "AdamW: ") << hotpath::format_stats(s));
    CHECK(s.passes_per_step == 3);
    CHECK(s.hot_signatures() == 1);
    CHECK(s.iterations >= 17);
  }
}

TEST_CASE("the Iteration scope marks iterations and ignores ops outside it", "[detect]") {
  auto a = torch::randn({32});
  Enabled on(4);
  for (int i = 0; i < 4; ++i) {
    auto noise = torch::randn({3});  // outside any iteration
    hotpath::Iteration it;
    auto r = a.sin().cos();
  }
  const auto s = hotpath::stats();
  REQUIRE(s.signatures.size() == 1);
  CHECK(s.signatures[0].hot);
  CHECK(s.signatures[0].ops_per_iteration == 2);
  CHECK(s.ops_unassigned == 4);  // the randn calls between scopes
}

TEST_CASE("disable restores plain eager: nothing is intercepted", "[detect]") {
  {
    Enabled on(2);
    auto a = torch::randn({8});
    auto r = a + a;
  }
  CHECK_FALSE(hotpath::is_enabled());
  const auto before = hotpath::stats().ops_seen;
  CHECK(before > 0);
  auto a = torch::randn({8});
  for (int i = 0; i < 10; ++i) a = a * 2 + 1;
  hotpath::step();
  CHECK(hotpath::stats().ops_seen == before);
  CHECK_FALSE(
      c10::Dispatcher::singleton().hasBackendFallbackForDispatchKey(c10::DispatchKey::Fake));
}

TEST_CASE("two threads with their own loops keep separate state", "[detect]") {
  auto loop = [](int64_t n, int iterations, hotpath::Stats* out) {
    auto a = torch::randn({n});
    hotpath::enable_hot_path_detection(5);
    for (int i = 0; i < iterations; ++i) {
      auto r = (a * 3.0).exp();
      hotpath::step();
    }
    *out = hotpath::stats();
    hotpath::disable_hot_path_detection();
  };
  hotpath::Stats s1, s2;
  std::thread t1(loop, 64, 7, &s1);
  std::thread t2(loop, 128, 3, &s2);
  t1.join();
  t2.join();
  REQUIRE(s1.signatures.size() == 1);
  REQUIRE(s2.signatures.size() == 1);
  CHECK(s1.signatures[0].id != s2.signatures[0].id);
  CHECK(s1.signatures[0].count == 7);
  CHECK(s1.signatures[0].hot);
  CHECK(s2.signatures[0].count == 3);
  CHECK_FALSE(s2.signatures[0].hot);
  CHECK(s1.iterations == 7);
  CHECK(s2.iterations == 3);
}

TEST_CASE("ops on a helper thread that inherited the caller's state count for the caller",
          "[detect]") {
  // This is how the autograd engine runs backward on its device threads.
  auto a = torch::randn({16});
  Enabled on(2);
  auto r = a.neg();
  const at::ThreadLocalState captured;
  std::thread helper([&] {
    at::ThreadLocalStateGuard g(captured);
    auto q = a.abs().sqrt();
  });
  helper.join();
  hotpath::step();
  CHECK(hotpath::stats().last().op_names ==
        std::vector<std::string>{"aten::neg", "aten::abs", "aten::sqrt"});
}

TEST_CASE("a dispatch key that is already taken is reported, not ignored", "[detect][key]") {
  hotpath::disable_hot_path_detection();
  auto handle = c10::Dispatcher::singleton().registerFallback(
      hotpath::detail::kHookKey, c10::KernelFunction::makeFallthrough(), "someone else");
  CHECK_THROWS_WITH(hotpath::enable_hot_path_detection(10),
                    Catch::Contains("dispatch key 'Fake'") &&
                        Catch::Contains("another fallback is registered on it") &&
                        Catch::Contains("2.11 and 2.15"));
  CHECK_FALSE(hotpath::is_enabled());
}

TEST_CASE("a dispatch key another mode switched on is not taken over", "[detect][key]") {
  // As a C++ FakeTensor mode does while it is active: the key in the thread's include set.
  hotpath::disable_hot_path_detection();
  {
    c10::impl::IncludeDispatchKeyGuard someone_elses_mode(hotpath::detail::kHookKey);
    CHECK_THROWS_WITH(hotpath::enable_hot_path_detection(10),
                      Catch::Contains("dispatch key 'Fake'") &&
                          Catch::Contains("already switched on in this thread's dispatch") &&
                          Catch::Contains("Enable hotpath outside that mode"));
    CHECK_FALSE(hotpath::is_enabled());
  }
  // Outside the mode it enables, and a thread that inherited hotpath's own state is not refused.
  hotpath::enable_hot_path_detection(10);
  CHECK(hotpath::is_enabled());
  const at::ThreadLocalState captured;
  bool enabled_there = false;
  std::thread helper([&] {
    at::ThreadLocalStateGuard g(captured);
    hotpath::enable_hot_path_detection(10);
    enabled_there = hotpath::is_enabled();
    hotpath::disable_hot_path_detection();
  });
  helper.join();
  CHECK(enabled_there);
  hotpath::disable_hot_path_detection();
}

TEST_CASE("the threshold comes from the environment when set", "[detect]") {
  auto a = torch::randn({4});
  ::setenv("HOTPATH_THRESHOLD", "2", 1);
  Enabled on(50);
  ::unsetenv("HOTPATH_THRESHOLD");
  CHECK(hotpath::stats().threshold == 2);
  for (int i = 0; i < 2; ++i) {
    auto r = a.exp();
    hotpath::step();
  }
  CHECK(hotpath::stats().hot_signatures() == 1);
}

namespace {
hotpath::Config quiet(int threshold) {
  hotpath::Config c;
  c.threshold = threshold;
  c.log_level = hotpath::LogLevel::Warn;
  c.remember = false;
  return c;
}
}  // namespace

TEST_CASE("where nothing fuses, hotpath stands aside and looks again later", "[detect][aside]") {
  // On the CPU (no fuse_cpu) the hot signature has nothing to fuse: interception buys nothing.
  Mlp mlp;
  Enabled on(quiet(5));
  for (int i = 0; i < 40; ++i) mlp.train_step();
  auto s = hotpath::stats();
  INFO(hotpath::format_stats(s));
  REQUIRE(s.stood_aside == 1);
  CHECK(s.standing_aside);
  CHECK(s.aside_reason.find("nothing to fuse") != std::string::npos);
  CHECK(hotpath::format_stats(s).find("stood aside 1 time(s)") != std::string::npos);
  // Standing aside, ops are not intercepted at all.
  const auto seen = s.ops_seen;
  for (int i = 0; i < 20; ++i) mlp.train_step();
  CHECK(hotpath::stats().ops_seen == seen);
  // After the pause (2 s) the hook is back: the next ops are seen, and with nothing to fuse it
  // stands aside again, for longer.
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  for (int i = 0; i < 200 && hotpath::stats().stood_aside < 2; ++i) mlp.train_step();
  s = hotpath::stats();
  CHECK(s.ops_seen > seen);
  CHECK(s.stood_aside == 2);
  CHECK(s.aside_seconds == Approx(2.0 + 4.0));
}

namespace {
// A GAN's step: D on real data, D on G's samples (D's optimizer), D on G's samples for G (G's
// optimizer); pass(k) runs the k-th of the three.
struct TinyGan {
  torch::nn::Linear g{8, 16}, d{16, 1};
  torch::optim::SGD opt_g{g->parameters(), 0.01}, opt_d{d->parameters(), 0.01};
  torch::Tensor real = torch::randn({4, 16}), noise = torch::randn({4, 8});
  void pass(int k) {
    if (k == 0) {
      opt_d.zero_grad();
      d->forward(real).mean().backward();
    } else if (k == 1) {
      (-d->forward(g->forward(noise).detach()).mean()).backward();
      opt_d.step();
    } else {
      opt_g.zero_grad();
      d->forward(g->forward(noise)).mean().backward();
      opt_g.step();
    }
  }
  void step() {
    for (int k = 0; k < 3; ++k) pass(k);
  }
};
}  // namespace

TEST_CASE("a step looked at again from its middle keeps its signature", "[detect][aside]") {
  // hotpath stands aside for a while (nothing fuses on the CPU) and looks again wherever the
  // loop is then: here at the GAN's second pass. The step it finds must be the same step, not
  // the same passes in another order under another signature.
  TinyGan gan;
  Enabled on(quiet(5));
  for (int i = 0; i < 200 && hotpath::stats().stood_aside == 0; ++i) gan.step();
  auto s = hotpath::stats();
  INFO(hotpath::format_stats(s));
  REQUIRE(s.stood_aside == 1);
  REQUIRE(s.passes_per_step == 3);
  REQUIRE(s.hot_signatures() == 1);
  const auto hot = [](const hotpath::Stats& st) {
    return *std::find_if(st.signatures.begin(), st.signatures.end(), [](auto& x) { return x.hot; });
  };
  const hotpath::SignatureStats before = hot(s);
  // The hook comes back at the first op that checks the clock after the pause (about one op in
  // a thousand checks): the passes run one by one until it has; the step is then finished.
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  const std::int64_t seen = s.ops_seen;
  int k = 0;
  for (int i = 0; i < 3000 && hotpath::stats().ops_seen == seen; ++i, k = (k + 1) % 3) gan.pass(k);
  REQUIRE(hotpath::stats().ops_seen > seen);
  INFO("looked again during pass " << (k + 2) % 3);
  for (; k != 0; k = (k + 1) % 3) gan.pass(k);
  for (int i = 0; i < 12; ++i) gan.step();
  s = hotpath::stats();
  INFO(hotpath::format_stats(s));
  CHECK(s.hot_signatures() == 1);
  const hotpath::SignatureStats after = hot(s);
  CHECK(after.id == before.id);
  CHECK(after.count >= before.count + 10);
}

TEST_CASE("standing aside that falls due inside a backward pass still comes back",
          "[detect][aside]") {
  // A CPU backward pass runs on this thread, each node under a guard that restores the thread's
  // dispatch keys and RecordFunction callbacks: standing aside begun there would lose its wake-up
  // callback at the node's end and never come back. A revert (the governor's way to ask for it)
  // from a gradient hook, inside the pass, makes it due there.
  Mlp mlp;
  Enabled on(quiet(5));
  bool fire = false;
  auto w = mlp.model->parameters()[0];
  w.register_hook([&](torch::Tensor g) {
    if (fire) {
      fire = false;
      hotpath::detail::thread_session()->revert(0, "a test");
    }
    return g;
  });
  for (int i = 0; i < 3; ++i) mlp.train_step();
  fire = true;
  mlp.train_step();
  auto s = hotpath::stats();
  INFO(hotpath::format_stats(s));
  REQUIRE(s.stood_aside == 1);
  CHECK(s.standing_aside);
  const auto seen = s.ops_seen;
  for (int i = 0; i < 5; ++i) mlp.train_step();
  CHECK(hotpath::stats().ops_seen == seen);  // out, and staying out
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  for (int i = 0; i < 3000 && hotpath::stats().ops_seen == seen; ++i) mlp.train_step();
  CHECK(hotpath::stats().ops_seen > seen);  // back after the pause
}

TEST_CASE("a loop whose ops change every step is stood aside", "[detect][aside]") {
  auto w = torch::randn({8}, torch::requires_grad());
  torch::optim::SGD opt({w}, 0.1);
  Enabled on(quiet(3));
  for (int i = 0; i < 40; ++i) {
    opt.zero_grad();
    // A new length every step: no signature repeats.
    auto x = torch::randn({i + 1, 8});
    (x * w).sum().backward();
    opt.step();
  }
  const auto s = hotpath::stats();
  INFO(hotpath::format_stats(s));
  CHECK(s.hot_signatures() == 0);
  REQUIRE(s.stood_aside == 1);
  CHECK(s.aside_reason.find("no iteration signature repeated") != std::string::npos);
}

TEST_CASE("a training loop with no stable step is stood aside", "[detect][aside]") {
  auto w = torch::randn({8, 8}, torch::requires_grad());
  torch::optim::SGD opt({w}, 0.01);
  std::mt19937 rng(5);
  Enabled on(quiet(3));
  for (int i = 0; i < 150; ++i) {
    opt.zero_grad();
    // A random depth each step: the forward passes seldom repeat in the same order.
    auto h = torch::randn({4, 8});
    const int depth = 1 + static_cast<int>(rng() % 40);
    for (int d = 0; d < depth; ++d) h = (d % 2 ? torch::tanh(h.mm(w)) : torch::relu(h.mm(w)));
    h.sum().backward();
    opt.step();
  }
  const auto s = hotpath::stats();
  INFO(hotpath::format_stats(s));
  CHECK(s.stood_aside >= 1);
  CHECK(s.aside_reason.find("no stable step") != std::string::npos);
}

TEST_CASE("HOTPATH_STAND_ASIDE=0 keeps interception on", "[detect][aside]") {
  setenv("HOTPATH_STAND_ASIDE", "0", 1);
  Mlp mlp;
  {
    Enabled on(quiet(5));
    for (int i = 0; i < 40; ++i) mlp.train_step();
    CHECK(hotpath::stats().stood_aside == 0);
  }
  unsetenv("HOTPATH_STAND_ASIDE");
}

TEST_CASE("a batch sliced at another place each step is the same step", "[detect]") {
  // As LibTorch's data loaders and language models slice their data: the slice's start and its
  // storage offset change every step (shared/repro/moving_slice.cpp).
  for (const bool marked : {false, true}) {
    CAPTURE(marked);
    torch::manual_seed(0);
    auto data = torch::randn({64 * 100, 32});
    auto lin = torch::nn::Linear(32, 1);
    torch::optim::SGD opt(lin->parameters(), 0.01);
    auto c = quiet(10);
    c.stand_aside = false;  // on the CPU nothing fuses; this is about finding the step
    Enabled on(c);
    for (int i = 0; i < 60; ++i) {
      auto x = data.slice(0, i * 64, i * 64 + 64);
      opt.zero_grad();
      lin(x).pow(2).mean().backward();
      opt.step();
      if (marked) hotpath::step();
    }
    const auto s = hotpath::stats();
    INFO(hotpath::format_stats(s));
    REQUIRE(s.hot_signatures() == 1);
    CHECK(s.iterations >= 57);
    const auto hot =
        std::find_if(s.signatures.begin(), s.signatures.end(), [](const auto& x) { return x.hot; });
    CHECK(hot->count >= 55);
  }
}

TEST_CASE("a loop that never trains is cut by its op period, after a grace", "[detect]") {
  // Inference under NoGradGuard: no forward pass reads a parameter with grad mode on. The op
  // period is used, once the loop has shown for a while (16384 ops) that it does not train: the
  // per-sample ops of a data loader before a first forward pass are no step.
  auto w = torch::randn({16, 16});
  auto c = quiet(10);
  c.stand_aside = false;
  Enabled on(c);
  torch::NoGradGuard no_grad;
  for (int i = 0; i < 6000; ++i) {
    auto x = torch::randn({4, 16});
    auto y = torch::relu(x.mm(w)).sum(1);
    (void)y;
  }
  const auto s = hotpath::stats();
  INFO(hotpath::format_stats(s));
  CHECK(s.passes_per_step == 0);
  CHECK(s.detected_period == 4);
  CHECK(s.ops_unassigned >= 16384 - 4);
  CHECK(s.iterations >= 6000 - 16384 / 4 - 10);
  CHECK(s.hot_signatures() == 1);
}
