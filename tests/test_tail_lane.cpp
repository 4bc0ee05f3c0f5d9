// A training step's tail on the light lane (Executor::in_tail, Session::tail_op): after a plan's
// iteration, the next batch's preparation, the loss's item() and logging run below the hook with
// a light record each, on CPU plans in auto-detected loops (no step() call).
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <vector>

#include "fusion_support.h"

namespace {

using namespace fusion_test;

// The small MLP + AdamW (fusion_support.h), its batch prepared in the step's tail as a
// DataLoader's per-sample transforms would: sample by sample, normalised, stacked. Every
// `eval_every` steps (0: never) an evaluation under NoGradGuard follows the preparation, so that
// the step's core reaches over it. `extra` more small adds in each tail: a long one.
struct TailLoop {
  Mlp mlp;
  std::vector<torch::Tensor> samples;
  int extra = 0;
  TailLoop() {
    for (int i = 0; i < 16; ++i) samples.push_back(torch::rand({16}));
  }
  torch::Tensor batch(int step) {
    std::vector<torch::Tensor> rows;
    for (int j = 0; j < 8; ++j)
      rows.push_back((samples[static_cast<std::size_t>((step + j) % 16)] - 0.5) / 0.25);
    return torch::stack(rows);
  }
  double run(int steps, int eval_every) {
    double losses = 0;
    for (int i = 0; i < steps; ++i) {
      mlp.opt.zero_grad();
      auto loss = torch::mse_loss(mlp.model->forward(mlp.x), mlp.y);
      loss.backward();
      mlp.opt.step();
      mlp.x = batch(i);  // the tail: the next batch, then the loss read on the host
      torch::Tensor acc = samples[static_cast<std::size_t>(i % 16)];
      for (int j = 0; j < extra; ++j)
        acc = acc.add(samples[static_cast<std::size_t>((i + j) % 16)]);
      losses += loss.item<double>();
      if (eval_every > 0 && i % eval_every == eval_every - 1) {
        torch::NoGradGuard no_grad;
        losses += mlp.model->forward(mlp.x).abs().mean().item<double>();
      }
    }
    return losses;
  }
};

struct Result {
  std::vector<torch::Tensor> params;
  double losses = 0;
  hotpath::Stats stats;
};

Result train(bool hot, int steps, int eval_every, int extra = 0) {
  torch::manual_seed(7);
  TailLoop loop;
  loop.extra = extra;
  std::unique_ptr<Enabled> on;
  if (hot) on = std::make_unique<Enabled>(cpu_plans(3));
  Result r;
  r.losses = loop.run(steps, eval_every);
  if (hot) r.stats = hotpath::stats();
  r.params = loop.mlp.params();
  return r;
}

// The parameters and the losses the loop read, as eager's bit for bit (CPU plans).
void check_bitwise(const Result& hot, const Result& eager) {
  REQUIRE(hot.params.size() == eager.params.size());
  for (std::size_t i = 0; i < eager.params.size(); ++i)
    CHECK(torch::equal(hot.params[i], eager.params[i]));
  CHECK(hot.losses == eager.losses);
}

// The loop under hotpath beside eager: it made a plan, and trained as eager did.
Result against_eager(int steps, int eval_every, int extra = 0) {
  const Result eager = train(false, steps, eval_every, extra);
  Result hot = train(true, steps, eval_every, extra);
  INFO(hotpath::format_stats(hot.stats));
  REQUIRE(hot.stats.last().fusion.planned);
  check_bitwise(hot, eager);
  return hot;
}

}  // namespace

TEST_CASE("a step's tail runs on the light lane after a plan's iteration", "[fusion][tail]") {
  const Result hot = against_eager(30, 0);
  INFO(hotpath::format_stats(hot.stats));
  const auto s = hot.stats.last();
  // The batch's 8 samples (a sub and a div each), the stack and item(), in each step after the
  // plan's first iteration.
  CHECK(hot.stats.ops_tail_lane >= 18 * 20);
  // The plan ran to its end in every step after it was built: the tail's light records kept
  // the detector on the step and the signature as it was.
  CHECK(s.fusion.fused_iterations >= 30 - s.hot_at_iteration - 2);
  CHECK(s.fusion.divergences == 0);
  CHECK(hot.stats.hot_signatures() == 1);
}

TEST_CASE("a long tail stays on the light lane where the stand-aside policy looks in",
          "[fusion][tail]") {
  // 2000 adds more in each tail: the policy's look every Session::kJudgeOps (4096) ops falls in
  // every other step's tail. It once sent its op the full way, which closed the tail, and the
  // rest of that tail paid the full record: about a quarter of the tails' ops.
  const int extra = 2000;
  const Result hot = against_eager(12, 0, extra);
  INFO(hotpath::format_stats(hot.stats));
  const auto s = hot.stats.last();
  REQUIRE(s.fusion.fused_iterations >= 4);
  // Each fused iteration's tail whole on the lane: the adds, and the batch's 18 ops with item().
  // (The tree before the fix: 12906 of 14126 here.)
  CHECK(hot.stats.ops_tail_lane >= (extra + 18) * s.fusion.fused_iterations);
  CHECK(s.fusion.divergences == 0);
}

TEST_CASE("an evaluation after the tail's light ops does not get them hashed", "[fusion][tail]") {
  // Every fifth step an evaluation (grad mode off) follows the batch's preparation: the step's
  // core, which ends with its last op with grad mode off, then reaches over light records. Such a
  // step is dropped, not hashed; the others keep their plan, and nothing differs from eager.
  const Result hot = against_eager(40, 5);
  INFO(hotpath::format_stats(hot.stats));
  const auto s = hot.stats.last();
  CHECK(hot.stats.ops_tail_lane > 0);
  CHECK(s.fusion.fused_iterations >= 10);
}

TEST_CASE("a loop marked with step() has no tail lane", "[fusion][tail]") {
  // Its iterations end where step() says: no tail, every op recorded in full.
  torch::manual_seed(7);
  TailLoop loop;
  Enabled on(cpu_plans(3));
  for (int i = 0; i < 20; ++i) {
    loop.run(1, 0);
    hotpath::step();
  }
  const hotpath::Stats stats = hotpath::stats();
  INFO(hotpath::format_stats(stats));
  CHECK(stats.last().fusion.planned);
  CHECK(stats.ops_tail_lane == 0);
}
