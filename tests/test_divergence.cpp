// What a plan's guard says when an iteration leaves the plan: the log line, stats() and the
// report (CPU plans: Config::fuse_cpu).
#include "fusion_support.h"

using namespace fusion_test;

TEST_CASE("a divergence says which input differed from the plan", "[fusion]") {
  torch::manual_seed(2);
  auto a = torch::randn({16, 8}), c = torch::randn({16, 8});
  std::vector<torch::Tensor> outs;
  Enabled on(cpu_plans(3));
  for (int i = 0; i < 10; ++i) {
    // The plan has a * c (two values from outside the loop); iteration 8 multiplies a by itself:
    // the same operator and metadata, the second input another value than the plan's.
    const auto& rhs = i == 8 ? a : c;
    outs.push_back((a * rhs + 1).sigmoid());
    hotpath::step();
  }
  const auto s = hotpath::stats();
  INFO(hotpath::format_stats(s));
  const hotpath::SignatureStats* planned = nullptr;
  for (const auto& sig : s.signatures)
    if (sig.fusion.planned) planned = &sig;
  REQUIRE(planned != nullptr);
  CHECK(planned->fusion.divergences == 1);
  CHECK(planned->fusion.last_divergence ==
        "iteration 9, op 0: expected aten::mul.Tensor, got aten::mul.Tensor with other inputs: "
        "input 1: expected the iteration's outside value #1, got its outside value #0 (a tensor "
        "first seen outside the loop (#1))");
  CHECK(hotpath::format_stats(s).find("the last left the plan at iteration 9, op 0") !=
        std::string::npos);
  // The report counts it beside the iterations that ran the plan whole.
  const auto rep = hotpath::report();
  const hotpath::SignatureReport* r = nullptr;
  for (const auto& sig : rep.signatures)
    if (sig.hex == planned->hex) r = &sig;
  REQUIRE(r != nullptr);
  CHECK(r->left_plan == 1);
  CHECK(r->fused_iterations == planned->fusion.fused_iterations);
  CHECK(hotpath::format_report(*r).find("left the plan part-way in 1 of " +
                                        std::to_string(r->fused_iterations + 1) +
                                        " iterations that started on it") != std::string::npos);
  CHECK(torch::equal(outs[8], (a * a + 1).sigmoid()));
  CHECK(torch::equal(outs[9], (a * c + 1).sigmoid()));
}

TEST_CASE("an add_ run for add, then a divergence: the variant's plan still adds", "[fusion]") {
  // Iterations of kind B ask for an out-of-place add where A's plan has add_ (autograd does so
  // when deferred ops hold a gradient buffer). Nothing else holds (a * b), so A's plan runs its
  // add_ instead (Executor::in_place_twin), and the record says add_. The iteration then leaves
  // the plan at its tanh. An A after the first B makes the recorder predict A after that mixed
  // signature, so every later B starts on A's plan and is recorded the same way, until its own
  // plan is made from those records. That plan must keep the add it was asked for, not take a
  // real add for its add_ and hand back (a * b) unadded.
  torch::manual_seed(3);
  auto a = torch::randn({16, 8}), b = torch::randn({16, 8}), c = torch::randn({16, 8});
  const std::string kinds = "AAAAAABAABBBBBBBBBBB";
  std::vector<torch::Tensor> outs;
  Enabled on(cpu_plans(3));
  for (const char k : kinds) {
    outs.push_back(k == 'A' ? (a * b).add_(c).sigmoid() : (a * b).add(c).tanh());
    hotpath::step();
  }
  const auto s = hotpath::stats();
  INFO(hotpath::format_stats(s));
  std::vector<const hotpath::SignatureStats*> planned;
  for (const auto& sig : s.signatures)
    if (sig.fusion.planned) planned.push_back(&sig);
  // A's, and the one recorded from B's iterations on A's plan, which runs B's add as A's plan
  // does (its add_ instead). Had the records kept add's input key, its guard would have let the
  // real add through as its add_: a wrong output, and a third plan (B's own) after it.
  REQUIRE(planned.size() == 2);
  CHECK(planned[0]->fusion.divergences >= 3);
  CHECK(planned[1]->fusion.fused_iterations >= 8);
  CHECK(planned[1]->fusion.divergences == 0);
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    CAPTURE(i, kinds[i]);
    const auto sum = a * b + c;
    CHECK(torch::allclose(outs[i], kinds[i] == 'A' ? sum.sigmoid() : sum.tanh(), 1e-6, 1e-6));
  }
}
