// CUDA graph replay (Config::replay) on whole training loops: each loop runs eagerly and under
// hotpath in one process, and what the program kept (parameters, losses) must agree. They need a
// GPU and are skipped without one (the GPU machine runs them through benchmarks/gpu_check.sh).
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "exec/replay.h"
#include "have_gpu.h"
#include "hotpath/hotpath.h"
#include "policy/decisions.h"
#include "replay_loops.h"

using namespace replay_loops;  // NOLINT(google-build-using-namespace)

TEST_CASE("an MLP + AdamW step replayed as a CUDA graph trains as the plan and eager do",
          "[gpu][replay]") {
  if (!have_gpu()) return;
  auto x = torch::randn({32, 64}, torch::kCUDA), y = torch::randn({32, 64}, torch::kCUDA);
  // Adam's bias corrections change every step: the kernels' graph nodes get them each replay.
  const Step step = [&](int, Model& model, Opt& opt, Kept&) { train_step(model, opt, x, y); };
  SECTION("one graph") {
    const Run r = check(60, step, 0);
    check_replayed(r, 30);
    CHECK(r.stats.last().fusion.replay_graphs == 1);
  }
  SECTION("cut into graphs of a few ops, each launched as the host goes on") {
    const Run r = check(60, step, 4);
    check_replayed(r, 30);
    CHECK(r.stats.last().fusion.replay_graphs >= 3);
  }
  SECTION("graphs of 2 ops: the first of 1") {
    const Run r = check(60, step, 2);
    check_replayed(r, 30);
    CHECK(r.stats.last().fusion.replay_graphs >= 6);
  }
}

TEST_CASE("a loss the loop keeps from every step is not overwritten by the next replay",
          "[gpu][replay]") {
  if (!have_gpu()) return;
  auto x = torch::randn({32, 64}, torch::kCUDA), y = torch::randn({32, 64}, torch::kCUDA);
  const Run r = check(40, [&](int, Model& model, Opt& opt, Kept& kept) {
    // On the graph's memory until the next replay copies it out.
    kept.push_back(train_step(model, opt, x, y).detach());
  });
  const auto f = r.stats.last().fusion;
  CHECK(f.replayed_iterations >= 20);
  CHECK(f.replay_rescued >= f.replayed_iterations - 1);
}

TEST_CASE("an item() inside the step splits it into two graphs", "[gpu][replay]") {
  if (!have_gpu()) return;
  auto x = torch::randn({32, 64}, torch::kCUDA), y = torch::randn({32, 64}, torch::kCUDA);
  const Run r = check(
      40,
      [&](int, Model& model, Opt& opt, Kept& kept) {
        opt.zero_grad();
        auto loss = torch::mse_loss(model->forward(x), y);
        const double v =
            loss.item<double>();  // the host waits: the forward pass's graph runs first
        kept.push_back(torch::tensor({v}, torch::kDouble));
        loss.backward();
        opt.step();
      },
      /*graph_ops=*/0);
  const auto f = r.stats.last().fusion;
  CHECK(f.replay_off.empty());
  CHECK(f.replay_graphs == 2);
  CHECK(f.replayed_iterations >= 20);
}

TEST_CASE("a batch at a new address every step is copied in where the graph reads it",
          "[gpu][replay]") {
  if (!have_gpu()) return;
  // Three batches in turn, each its own tensor: the iteration before the capture saw another
  // address than the captured one, so the graph reads a static copy that each replay refreshes.
  std::vector<torch::Tensor> xs;
  for (int k = 0; k < 3; ++k) xs.push_back(torch::randn({32, 64}, torch::kCUDA));
  auto y = torch::randn({32, 64}, torch::kCUDA);
  const Run r = check(50, [&](int i, Model& model, Opt& opt, Kept& kept) {
    kept.push_back(train_step(model, opt, xs[static_cast<std::size_t>(i % 3)], y).detach());
  });
  check_replayed(r, 30);
  // The graph copies the batch in itself; each replay points its copy at the batch's address.
  const auto f = r.stats.last().fusion;
  CHECK(f.replay_copy_nodes >= 1);
  CHECK(f.replay_repointed >= f.replayed_iterations - 1);
}

TEST_CASE("an epoch's last, smaller batch leaves the plan at its first op, and replay goes on",
          "[gpu][replay]") {
  if (!have_gpu()) return;
  // A DataLoader's epochs: 11 batches of 32 rows, then one of 16 (60000 images in batches of 64
  // leave one of 32 at the end of each epoch). The small batch's first op is not the plan's: its
  // iteration leaves the plan there, in more epochs than replayed iterations may leave it.
  auto x = torch::randn({32, 64}, torch::kCUDA), y = torch::randn({32, 64}, torch::kCUDA);
  const auto xs = x.narrow(0, 0, 16).clone(), ys = y.narrow(0, 0, 16).clone();
  const int epochs = 2 * hotpath::detail::kReplayDivergences + 1;
  const Run r = check(12 * epochs, [&](int i, Model& model, Opt& opt, Kept& kept) {
    const bool last = i % 12 == 11;
    kept.push_back(train_step(model, opt, last ? xs : x, last ? ys : y).detach());
  });
  // The loop's step (the small batch's iterations have a signature of their own).
  INFO(hotpath::format_stats(r.stats));
  const auto f = main_signature(r.stats).fusion;
  CHECK(f.replay_off.empty());
  CHECK(f.divergences >= epochs - 1);  // every small batch after the plan's first iteration
  // At most 11 replays an epoch: more than three epochs' worth went past kReplayDivergences
  // small batches, each of which would have counted against replay.
  CHECK(f.replayed_iterations > 11 * hotpath::detail::kReplayDivergences);
}

TEST_CASE("a value inside a fused group that the loop keeps in some steps is written in those",
          "[gpu][replay]") {
  if (!have_gpu()) return;
  // Under no_grad nothing after the group reads h, so its kernel skips writing it except where
  // someone holds it at the launch: here the loop, in one step of four. h changes every step
  // (probe is updated in place outside the step), so a stale h would show. Against eager only:
  // the plan skips h speculatively and recomputes it eagerly when it is read (its rounding),
  // where the replayed kernel writes it.
  auto x = torch::randn({32, 64}, torch::kCUDA), y = torch::randn({32, 64}, torch::kCUDA);
  const auto probe0 = torch::randn({2048, 64}, torch::kCUDA);
  auto probe = torch::empty_like(probe0);
  const Step step = [&](int i, Model& model, Opt& opt, Kept& kept) {
    {
      hotpath::Pause outside;
      probe.copy_(probe0 * (1.0 + 0.05 * i));
    }
    train_step(model, opt, x, y);
    torch::NoGradGuard no_grad;
    auto h = probe * 1.5 + 0.25;
    kept.push_back((h * h - probe).relu());
    if (i % 4 == 1) kept.push_back(h);
  };
  const int graph_ops = hotpath::Config{}.replay_graph_ops;
  const Run eager = train(false, false, 60, step, graph_ops);
  const Run replayed = train(true, true, 60, step, graph_ops);
  INFO(hotpath::format_stats(replayed.stats));
  REQUIRE(replayed.kept.size() == eager.kept.size());
  for (std::size_t i = 0; i < eager.kept.size(); ++i) {
    CAPTURE(i);
    CHECK(rel_error(replayed.kept[i], eager.kept[i]) <= 1e-4);
  }
  for (std::size_t i = 0; i < eager.params.size(); ++i)
    CHECK(rel_error(replayed.params[i], eager.params[i]) <= 1e-4);
  check_replayed(replayed, 30);
}

TEST_CASE("a large batch is read where it stays, and copied in once it moves", "[gpu][replay]") {
  if (!have_gpu()) return;
  // 2 MiB a batch (above kStaticMaxBytes): the graph reads the first where it is; from step 30
  // the batches alternate, replay leaves at the first that moved, and a new capture reads a
  // static copy refreshed each replay.
  std::vector<torch::Tensor> xs;
  for (int k = 0; k < 2; ++k) xs.push_back(torch::randn({8192, 64}, torch::kCUDA));
  REQUIRE(xs[0].nbytes() > hotpath::detail::kStaticMaxBytes);
  auto y = torch::randn({8192, 64}, torch::kCUDA);
  const Run r = check(70, [&](int i, Model& model, Opt& opt, Kept& kept) {
    const std::size_t b = i < 30 ? 0 : static_cast<std::size_t>(i % 2);
    kept.push_back(train_step(model, opt, xs[b], y).detach());
  });
  // The step whose batch moved left the graphs (and its plan: one divergence), and was captured
  // again from there.
  const auto f = r.stats.last().fusion;
  CHECK(f.replay_off.empty());
  CHECK(f.replayed_iterations >= 25);
  CHECK(f.divergences <= 1);
  CHECK(f.replay_captures >= 2);
}

TEST_CASE("a batch sliced from a larger tensor at another place each step is copied in",
          "[gpu][replay]") {
  if (!have_gpu()) return;
  // Rows of a larger tensor with a gap after each (not dense), and a target broadcast from one
  // row (it repeats memory): each static copy holds the span the view covers, laid out as it is.
  auto data = torch::randn({4, 32, 65}, torch::kCUDA);
  auto row = torch::randn({1, 64}, torch::kCUDA);
  const Run r = check(40, [&](int i, Model& model, Opt& opt, Kept&) {
    torch::Tensor x, y;
    {
      hotpath::Pause outside;
      x = data[i % 4].slice(1, 0, 64);
      y = row.expand({32, 64});
    }
    train_step(model, opt, x, y);
  });
  check_replayed(r, 20);
}

TEST_CASE("a one-element input with a stride of 2, read by an eager op, is captured and replayed",
          "[gpu][replay]") {
  if (!have_gpu()) return;
  // A slice with a step of a small tensor outside the loop: one element, stride 2. The capture
  // keeps what an op only reads of such an input as bytes, to see that it did not write it; that
  // view threw into the loop (fuzz seed 50000813). The product runs eagerly: its own run is
  // checked.
  auto x = torch::randn({32, 64}, torch::kCUDA), y = torch::randn({32, 64}, torch::kCUDA);
  auto scale = torch::randn({2}, torch::kCUDA), row = torch::randn({1, 64}, torch::kCUDA);
  const Run r = check(40, [&](int, Model& model, Opt& opt, Kept& kept) {
    torch::Tensor s;
    {
      hotpath::Pause outside;
      s = scale.slice(0, 0, 2, 2).view({1, 1});
    }
    kept.push_back(train_step(model, opt, x + torch::mm(s, row), y).detach());
  });
  check_replayed(r, 20);
}

TEST_CASE("a batch copied to the GPU inside the step is copied in where the graph reads it",
          "[gpu][replay]") {
  if (!have_gpu()) return;
  // The data loader's way: each step's batch comes from the CPU (a copy the graphs cannot hold:
  // it runs between them, and the graph reads a static copy of its result).
  std::vector<torch::Tensor> cpu;
  for (int k = 0; k < 4; ++k) cpu.push_back(torch::randn({32, 64}));
  auto y = torch::randn({32, 64}, torch::kCUDA);
  const Run r = check(40, [&](int i, Model& model, Opt& opt, Kept&) {
    auto x = cpu[static_cast<std::size_t>(i % 4)].to(torch::kCUDA);
    train_step(model, opt, x, y);
  });
  check_replayed(r, 20);
}

TEST_CASE("new data each step in the same tensor replays with the new data", "[gpu][replay]") {
  if (!have_gpu()) return;
  // The batch is copied into one tensor before each step (outside hotpath, as a data loader's
  // copy would be): the graph reads the new batch where it read the old one.
  const std::vector<torch::Tensor> batches = {torch::randn({32, 64}, torch::kCUDA),
                                              torch::randn({32, 64}, torch::kCUDA)};
  auto x = torch::empty({32, 64}, torch::kCUDA), y = torch::randn({32, 64}, torch::kCUDA);
  const Run r = check(40, [&](int i, Model& model, Opt& opt, Kept&) {
    {
      hotpath::Pause outside;
      x.copy_(batches[static_cast<std::size_t>(i % 3 == 0)]);
    }
    train_step(model, opt, x, y);
  });
  const auto f = r.stats.last().fusion;
  CHECK(f.replay_off.empty());
  CHECK(f.replayed_iterations >= 20);
  // The graph's own copies bring the new data in; nothing moved, so the host did nothing.
  CHECK(f.replay_copy_nodes >= 1);
  CHECK(f.replay_repointed == 0);
}

TEST_CASE("a step that draws random numbers replays them where eager draws them", "[gpu][replay]") {
  if (!have_gpu()) return;
  // Each random op starts a graph of its own, and a replay moves the default generator as
  // eager's ops would. The parameters must equal the plan's bit for bit (check): the same numbers
  // were drawn.
  auto y = torch::randn({32, 64}, torch::kCUDA);
  SECTION("a new batch from randn and dropout on the output, every step") {
    const Run r = check(40, [&](int, Model& model, Opt& opt, Kept& kept) {
      auto x = torch::randn({32, 64}, torch::kCUDA);
      opt.zero_grad();
      auto loss = torch::mse_loss(torch::dropout(model->forward(x), 0.25, /*train=*/true), y);
      loss.backward();
      opt.step();
      kept.push_back(loss.detach());
    });
    check_replayed(r, 20);
    CHECK(r.stats.last().fusion.replay_graphs >= 2);
  }
  SECTION("a mask drawn into a new tensor first: the graph before the draw holds no kernel") {
    // The empty graph is not launched, and CUDAGraph's warning of it does not reach the program.
    struct Warnings : c10::WarningHandler {
      int empty_graphs = 0;
      void process(const c10::Warning& w) override {
        empty_graphs += w.msg().find("The CUDA Graph is empty") != std::string::npos ? 1 : 0;
      }
    } warnings;
    c10::WarningUtils::WarningHandlerGuard guard(&warnings);
    auto x = torch::randn({32, 64}, torch::kCUDA);
    const Run r = check(40, [&](int, Model& model, Opt& opt, Kept& kept) {
      auto mask = torch::empty({32, 64}, torch::kCUDA).bernoulli_(0.75);
      kept.push_back(train_step(model, opt, x * mask, y).detach());
    });
    check_replayed(r, 20);
    CHECK(warnings.empty_graphs == 0);
  }
}

TEST_CASE("an output of no bytes is handed out as an empty tensor", "[gpu][replay]") {
  if (!have_gpu()) return;
  // A tensor of no elements (as cuDNN's batch norm returns for its reserve space) has no memory
  // in the capture either: a replay hands out an empty tensor of its shape, where it once left
  // the plan ("had no tensor in the captured iteration").
  auto x = torch::randn({32, 64}, torch::kCUDA), y = torch::randn({32, 64}, torch::kCUDA);
  const Run r = check(40, [&](int, Model& model, Opt& opt, Kept& kept) {
    const auto none = torch::empty({0, 64}, torch::kCUDA);
    kept.push_back(train_step(model, opt, x + none.sum(0), y).detach());
  });
  check_replayed(r, 20);
}

TEST_CASE("a batch norm's running statistics are updated by every replay", "[gpu][replay]") {
  if (!have_gpu()) return;
  // Batch norm writes running_mean and running_var in place though its schema does not say so:
  // a replay that took them for read-only inputs read them through a copy and left them as the
  // captured iteration did.
  auto x = torch::randn({32, 64}, torch::kCUDA), y = torch::randn({32, 64}, torch::kCUDA);
  auto mean = torch::zeros({64}, torch::kCUDA), var = torch::ones({64}, torch::kCUDA);
  bool cudnn = true;         // aten::cudnn_batch_norm; without cuDNN, aten::native_batch_norm
  bool stats_alone = false;  // aten::batch_norm_update_stats
  SECTION("cuDNN's batch norm") { cudnn = true; }
  SECTION("ATen's own batch norm") { cudnn = false; }
  SECTION("the statistics alone") { stats_alone = true; }
  const Run r = check(40, [&](int i, Model& model, Opt& opt, Kept& kept) {
    if (i == 0) {
      hotpath::Pause outside;  // each run starts from the same statistics
      mean.zero_();
      var.fill_(1);
    }
    opt.zero_grad();
    // h beside its normalised self: a batch norm right after a bias takes away its gradient,
    // which Adam would then scale up from rounding noise.
    const auto h = model->forward(x);
    at::Tensor n;
    if (stats_alone) {
      const auto [m, v] = at::batch_norm_update_stats(h.detach(), mean, var, 0.1);
      n = h * m.mean() + v.mean();
    } else {
      n = torch::batch_norm(h, {}, {}, mean, var, /*training=*/true, 0.1, 1e-5, cudnn);
    }
    torch::mse_loss(h + n, y).backward();
    opt.step();
    if (i == 39) {
      kept.push_back(mean);
      kept.push_back(var);
    }
  });
  check_replayed(r, 20);
}

// An op whose schema says it reads `counter`, but which adds one to it in place: the kind of op
// a capture cannot take at its schema's word.
TORCH_LIBRARY(hotpath_replay_test, m) { m.def("bump(Tensor counter, Tensor x) -> Tensor"); }
TORCH_LIBRARY_IMPL(hotpath_replay_test, CUDA, m) {
  m.impl("bump", [](const at::Tensor& counter, const at::Tensor& x) {
    counter.add_(1);
    return x * 2;
  });
}

TEST_CASE("an op that writes an input its schema says it reads is not captured", "[gpu][replay]") {
  if (!have_gpu()) return;
  // The graph would read the counter through a copy and add one to the copy: the loop's counter
  // would stop where the capture left it. The captured iteration sees the write and gives up.
  static const auto bump = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("hotpath_replay_test::bump", "")
                               .typed<at::Tensor(const at::Tensor&, const at::Tensor&)>();
  auto x = torch::randn({32, 64}, torch::kCUDA), y = torch::randn({32, 64}, torch::kCUDA);
  auto counter = torch::zeros({4}, torch::kCUDA);
  const Run r = check(40, [&](int i, Model& model, Opt& opt, Kept& kept) {
    if (i == 0) {
      hotpath::Pause outside;
      counter.zero_();
    }
    kept.push_back(train_step(model, opt, x, bump.call(counter, y) / 2).detach());
    if (i == 39) kept.push_back(counter);
  });
  const auto f = r.stats.last().fusion;
  INFO(hotpath::format_stats(r.stats));
  CHECK(f.replayed_iterations == 0);
  CHECK(f.replay_off.find("hotpath_replay_test::bump") != std::string::npos);
  CHECK(f.replay_off.find("which its schema says it only reads") != std::string::npos);
  CHECK(r.kept.back().eq(40).all().item<bool>());
  CHECK(hotpath::detail::fingerprint_kernel(0) != nullptr);  // the check it took: fingerprints
}

TEST_CASE("a plan an earlier run kept replayed is captured after kReplayAfterKnown iterations",
          "[gpu][replay]") {
  if (!have_gpu()) return;
  auto x = torch::randn({32, 64}, torch::kCUDA), y = torch::randn({32, 64}, torch::kCUDA);
  const Step step = [&](int, Model& model, Opt& opt, Kept&) { train_step(model, opt, x, y); };
  const int ops = hotpath::Config{}.replay_graph_ops;
  const Run eager = train(false, false, 40, step, ops);
  const Run first = train(true, true, 40, step, ops);
  const std::uint64_t signature = first.stats.last().id;
  // The verdict a kept plan leaves (here written directly: the loop above judges nothing).
  const hotpath::detail::DecisionStore store(cache_path());
  hotpath::detail::Decision d;
  d.compile = true;
  auto known = [&](bool replay_kept) {
    d.replay_kept = replay_kept;
    store.save(signature, d);
    const Run r = train(true, true, 40, step, ops, /*remember=*/true);
    INFO(hotpath::format_stats(r.stats));
    CHECK(r.stats.last().id == signature);
    CHECK(r.stats.last().fusion.remembered.find("known winner") != std::string::npos);
    check_replayed(r, 20);
    for (std::size_t i = 0; i < eager.params.size(); ++i)
      CHECK(rel_error(r.params[i], eager.params[i]) <= 1e-4);
    return r.stats.last().fusion.replayed_iterations;
  };
  const std::int64_t sooner = known(true), later = known(false);
  // Both hot at first sight; the one remembered replayed is captured kReplayAfter -
  // kReplayAfterKnown iterations sooner (three either way: where each run's kernels are first
  // ready; under ctest, in a process of its own, 10 sooner where 8 were expected).
  constexpr std::int64_t kSooner =
      hotpath::detail::kReplayAfter - hotpath::detail::kReplayAfterKnown;
  CHECK(sooner - later >= kSooner - 3);
  CHECK(sooner - later <= kSooner + 3);
}

TEST_CASE("a known winner's capture is held until the governor lets it go ahead", "[gpu][replay]") {
  // An earlier run said what the capture cost beyond an iteration: the capture waits until the
  // run is that far ahead of eager (policy/governor.h, kReplayHoldMax). Here the cost is never
  // repaid (1e9 ms against eager at 1 s an iteration, far ahead from the first): the governor
  // lets it go after kReplayHoldMax fused iterations it has timed; the loop trains as eager does
  // all along, and runs replayed after that.
  if (!have_gpu()) return;
  auto x = torch::randn({32, 64}, torch::kCUDA), y = torch::randn({32, 64}, torch::kCUDA);
  const Step step = [&](int, Model& model, Opt& opt, Kept&) { train_step(model, opt, x, y); };
  const int ops = hotpath::Config{}.replay_graph_ops;
  constexpr int kSteps = 100;
  const Run eager = train(false, false, kSteps, step, ops);
  const Run first = train(true, true, kSteps, step, ops);
  const std::uint64_t signature = first.stats.last().id;
  const hotpath::detail::DecisionStore store(cache_path());
  hotpath::detail::Decision d;
  d.compile = true;
  d.replay_kept = true;
  d.eager_ms = 1000;
  auto known = [&](double capture_ms) {
    d.capture_ms = capture_ms;
    store.save(signature, d);
    const Run r = train(true, true, kSteps, step, ops, /*remember=*/true);
    INFO(hotpath::format_stats(r.stats));
    CHECK(r.stats.last().id == signature);
    check_replayed(r, 20);
    for (std::size_t i = 0; i < eager.params.size(); ++i)
      CHECK(rel_error(r.params[i], eager.params[i]) <= 1e-4);
    return r.stats.last().fusion.replayed_iterations;
  };
  const std::int64_t at_once = known(0), held = known(1e9);
  CAPTURE(at_once, held);
  CHECK(held <= at_once - 40);
  CHECK(held >= kSteps - hotpath::detail::kReplayHeldAtMost - 10);
}

TEST_CASE("a capture grows its pool first to what an earlier run's capture took", "[gpu][replay]") {
  // A batch of 16384 rows makes activations and their gradients of 4-16 MiB: each shadow the
  // capture allocates for them opens an allocator segment of its own in the graphs' pool. Told
  // how large the earlier run's pool grew (PlanPrior::replay_pool_bytes), a capture takes that
  // memory before it starts (one large block, and the small blocks' segments it had), and the
  // shadows split it.
  if (!have_gpu()) return;
  auto x = torch::randn({16384, 64}, torch::kCUDA), y = torch::randn({16384, 64}, torch::kCUDA);
  const Step step = [&](int, Model& model, Opt& opt, Kept&) { train_step(model, opt, x, y); };
  const int ops = hotpath::Config{}.replay_graph_ops;
  constexpr int kSteps = 120;
  const Run eager = train(false, false, kSteps, step, ops);
  const Run first = train(true, true, kSteps, step, ops);
  check_replayed(first, 10);
  const hotpath::FusionStats grown = first.stats.last().fusion;
  CAPTURE(grown.replay_capture_segments, grown.replay_pool_bytes);
  REQUIRE(grown.replay_capture_segments >= 4);
  hotpath::detail::Decision d;
  d.compile = true;
  d.replay_kept = true;
  d.eager_ms = 1;
  d.replay_pool_bytes = grown.replay_pool_bytes;
  // Of it, small blocks' segments (stats() does not say how many): two at most in this loop.
  d.replay_pool_small_bytes = 4 << 20;
  hotpath::detail::DecisionStore(cache_path()).save(first.stats.last().id, d);
  const Run known = train(true, true, kSteps, step, ops, /*remember=*/true);
  INFO(hotpath::format_stats(known.stats));
  check_replayed(known, 10);
  const hotpath::FusionStats f = known.stats.last().fusion;
  CHECK(f.replay_capture_segments <= grown.replay_capture_segments / 2);
  CHECK(f.replay_pool_bytes >= grown.replay_pool_bytes);
  CHECK(f.replay_pool_bytes <= grown.replay_pool_bytes + (2 << 20));
  for (std::size_t i = 0; i < eager.params.size(); ++i)
    CHECK(rel_error(known.params[i], eager.params[i]) <= 1e-4);
}

namespace {
// check_loss of a step that transposes the model's output (times 2) in place, then takes
// `loss` of it and a target of the transposed shape.
Run transposed_in_place(
    const std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>& loss) {
  auto x = torch::randn({32, 64}, torch::kCUDA), y = torch::randn({64, 32}, torch::kCUDA);
  return check_loss([&](Model& model) {
    auto h = model->forward(x) * 2;
    h.t_();
    return loss(h, y);
  });
}
}  // namespace

TEST_CASE("a value inside the step transposed in place is transposed in every replay",
          "[gpu][replay]") {
  if (!have_gpu()) return;
  // t_() changes the sizes of a tensor the replay handed out: a graph would leave them as they
  // were, so it runs as it is, as a view does (changes_view), and the ops after it read the
  // transposed tensor.
  check_replayed(transposed_in_place([](const torch::Tensor& h, const torch::Tensor& y) {
                   return torch::mse_loss(h.sin(), y);
                 }),
                 20);
}

TEST_CASE("a value transposed in place is read by the fused kernels by its new layout",
          "[gpu][replay]") {
  if (!have_gpu()) return;
  // The sum and difference of the transposed value fuse into one kernel, which read it by the
  // layout it had before t_() (a tensor's versions shared their first one's) until each version
  // with a layout of its own became a tensor of its own (Graph::from_trace).
  check_replayed(transposed_in_place([](const torch::Tensor& h, const torch::Tensor& y) {
                   return ((h + y) * (h - y)).mean();
                 }),
                 20);
}

TEST_CASE("a slice whose end changes inside a replayed step is checked, not taken on trust",
          "[gpu][replay]") {
  if (!have_gpu()) return;
  // A slice's end is a position argument, left out of the op's key: the slice's output sizes do
  // not follow from what the fast lane checked, so the op that reads it compares them with the
  // plan's, leaves the replay where they differ, and the step runs as eager runs it. (The
  // iteration that leaves finishes eagerly: near eager, not bit for bit the plan's.)
  auto x = torch::randn({32, 64}, torch::kCUDA), y = torch::randn({32, 64}, torch::kCUDA);
  const Step step = [&](int i, Model& model, Opt& opt, Kept& kept) {
    opt.zero_grad();
    const std::int64_t end = i < 30 ? 64 : 48;
    auto h = model->forward(x).slice(1, 0, end);
    auto loss = (h - y.slice(1, 0, end)).pow(2).mean();
    loss.backward();
    opt.step();
    kept.push_back(loss.detach());
  };
  const int graph_ops = hotpath::Config{}.replay_graph_ops;
  const Run replayed = train(true, true, 40, step, graph_ops);
  check_near_eager(replayed, train(false, false, 40, step, graph_ops));
  // The first slice's step: replayed, then left where the slice's sizes changed.
  const hotpath::FusionStats f = main_signature(replayed.stats).fusion;
  INFO(hotpath::format_stats(replayed.stats));
  CHECK(f.replayed_iterations >= 10);
  CHECK(f.divergences >= 1);
}

TEST_CASE("a step that resizes a value in place is not replayed, and trains as eager does",
          "[gpu][replay]") {
  if (!have_gpu()) return;
  // resize_ changes the sizes of a tensor the replay would hand out, so the capture refuses it
  // (Replay::resizes) and the plan runs the step. The plan's fused mse_loss_backward read the
  // resized target by its old layout ([64, 32]) until the resized value became a tensor of its
  // own (Graph::from_trace): parameters 34-74% away from eager's.
  auto x = torch::randn({32, 64}, torch::kCUDA), y = torch::randn({64, 32}, torch::kCUDA);
  const Run r = check_loss([&](Model& model) {
    auto target = y.sin() * 2;
    target.resize_({32, 64});
    return torch::mse_loss(model->forward(x), target);
  });
  const auto f = r.stats.last().fusion;
  INFO(hotpath::format_stats(r.stats));
  CHECK(f.fused_iterations >= 20);
  CHECK(f.replayed_iterations == 0);
  CHECK(f.replay_off.find("resizes a tensor in place") != std::string::npos);
}
