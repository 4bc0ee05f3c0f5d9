// The partition of a traced iteration into fusion groups (fusion/partition.h): what it keeps
// whole whatever order the ops come in.
#include "fusion_support.h"

using namespace fusion_test;

// Cause: a node that joined two groups merged them into the first and left the second empty;
// the partition then read the empty group's first node (undefined: a stale index, here of
// nll_loss_backward, which pays alone) and made it a group of no nodes, on which the planner
// crashed (fuzzer seed 5011, the CPU: a cross entropy of clamped values whose targets come from
// a row mean, with its backward). No group is empty now, and the loop runs as eager does.
TEST_CASE("a node that joins two groups leaves no empty group behind", "[fusion][rows]") {
  auto train = [](bool hot) {
    torch::manual_seed(5011);
    auto x = torch::randn({9, 32}, torch::requires_grad());
    namespace F = torch::nn::functional;
    return sgd_loop(hot, x, [&] {
      auto mean = x.mean(-1, true);
      auto act = torch::silu(mean);
      auto clamped = x.clamp(-0.75, 0.75);
      auto loss = F::cross_entropy(clamped, act.detach().argmax(1).remainder(32));
      auto total = torch::zeros({});
      for (const auto& t : {mean, act, clamped, loss})
        total = total + t.nan_to_num(0, 0, 0).sum() * 0.01;
      total.backward();
      return total;
    });
  };
  const auto plan = check_plan_is_eager(train, 8);
  REQUIRE(plan != nullptr);
  INFO(plan->partition.to_text(*plan->graph));
  CHECK_FALSE(plan->partition.groups.empty());
  for (const auto& grp : plan->partition.groups) CHECK_FALSE(grp.nodes.empty());
}
