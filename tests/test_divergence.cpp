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
