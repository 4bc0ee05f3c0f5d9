// The partition of a traced iteration into fusion groups (fusion/partition.h): what it keeps
// whole whatever order the ops come in; and the graph it is made from (ir/graph.h): which values
// are versions of one tensor.
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

// Cause: a tensor's versions shared its first version's layout in the kernel, so a value resized
// (resize_) or transposed (t_) in place was read by the old one: on the GPU the fused
// mse_loss_backward of a target resized from [64, 32] to [32, 64] read it as [64, 32] and
// trained 30-75% away from eager (every launch beyond tolerance under Config::verify). Such a
// value is a tensor of its own now, as a view is, and each kernel indexes it by its layout.
TEST_CASE("a value resized or transposed in place is indexed by its new layout",
          "[fusion][codegen]") {
  for (const std::string how : {"resize_", "t_"}) {
    CAPTURE(how);
    auto loop = [&](bool hot) {
      torch::manual_seed(8);
      auto w = torch::randn({4, 8}, torch::requires_grad());
      auto y = torch::randn({8, 4});
      return sgd_loop(hot, w, [&] {
        torch::Tensor loss;
        if (how == "resize_") {
          auto target = y * 2;
          target.resize_({4, 8});
          loss = torch::mse_loss(w * 1.5, target);
        } else {
          auto h = w * 2;
          h.t_();
          loss = ((h + y) * (h - y)).sum();
        }
        loss.backward();
        return loss;
      });
    };
    const auto plan = check_plan_is_eager(loop, 8);
    REQUIRE(plan != nullptr);
    const auto& g = *plan->graph;
    INFO(g.to_text() << plan->partition.to_text(g));
    // The op's result is a tensor of its own, with the layout it has.
    int changed = -1;
    for (const auto& n : g.nodes())
      if (n.name == "aten::" + how) changed = n.outputs[0];
    REQUIRE(changed >= 0);
    CHECK(g.value(changed).tensor == changed);
    // Some group reads it, and every group's kernel is made and compiles.
    bool read = false;
    REQUIRE_FALSE(plan->partition.groups.empty());
    for (const auto& grp : plan->partition.groups) {
      for (int m : grp.nodes)
        for (const auto& in : g.node(m).inputs) read = read || in.value == changed;
      check_compiles(g, grp);
    }
    CHECK(read);
  }
}
