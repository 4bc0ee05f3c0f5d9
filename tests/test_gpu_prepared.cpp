// A known winner's plan built before its signature is seen (Config::prepare_known), on a GPU:
// taken at first sight where the kept trace agrees with the loop's, refused where it does not,
// and training as eager does either way.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

#include "compile/worker.h"
#include "gpu_mlp.h"
#include "have_gpu.h"
#include "hotpath/hotpath.h"
#include "policy/decisions.h"
#include "session/session.h"
#include "temp_dir.h"
#include "trace/trace_file.h"

namespace {

const hotpath::SignatureStats* hot_signature(const hotpath::Stats& s) {
  for (const auto& sig : s.signatures)
    if (sig.hot) return &sig;
  return nullptr;
}

}  // namespace

TEST_CASE("a known winner's plan is built before it is seen, and training is eager's",
          "[gpu][prepared]") {
  using hotpath_test::check_equal_to_eager;
  using hotpath_test::train_gpu_mlp;
  namespace hd = hotpath::detail;
  if (!hotpath_test::have_gpu()) return;
  const hotpath_test::TempDir cache("hotpath-gpu-prepared");
  auto kept = [&](hotpath::Config& c) {
    c.cache_dir = cache.path();
    c.remember = true;
  };
  // Before the prepared plan is taken, the worker has built it and loaded its kernels; the loop's
  // steps in which the signature turned hot and in which an iteration first ran fused.
  int hot_step = -1, fused_step = -1;
  auto drained = [&](int i) {
    if (i == 0) hd::CompileWorker::instance().drain();
    const hotpath::Stats s = hotpath::stats();
    const hotpath::SignatureStats* h = hot_signature(s);
    if (h != nullptr && hot_step < 0) hot_step = i;
    if (h != nullptr && h->fusion.fused_iterations > 0 && fused_step < 0) fused_step = i;
  };

  // 1. Hot at 3: the plan is built from the loop's trace, which is kept.
  hotpath::Stats first;
  train_gpu_mlp(true, 20, &first, {}, kept);
  INFO(hotpath::format_stats(first));
  const hotpath::SignatureStats* hot = hot_signature(first);
  REQUIRE(hot != nullptr);
  const std::uint64_t sig = hot->id;
  CHECK_FALSE(hot->fusion.prepared);
  std::string why;
  const std::optional<hd::HotTrace> trace = hd::load_trace(cache.path(), sig, &why);
  CAPTURE(why);
  REQUIRE(trace.has_value());
  // Its verdict a winner (the governor's own would take timing windows).
  hd::Decision winner;
  winner.compile = true;
  winner.reason = "a test's";
  hd::DecisionStore(cache.path()).save(sig, winner);

  // 2. A known winner: hot at first sight, its plan ready then.
  hotpath::Stats second;
  const auto got = train_gpu_mlp(true, 40, &second, drained, kept);
  INFO(hotpath::format_stats(second));
  const hotpath::SignatureStats* again = hot_signature(second);
  REQUIRE(again != nullptr);
  REQUIRE(again->id == sig);
  const hotpath::FusionStats& f = again->fusion;
  CHECK(f.prepared);
  CHECK(f.remembered.find("built before it was seen") != std::string::npos);
  // Fused from the step after the one it turned hot in: nothing left to build or load.
  CAPTURE(hot_step, fused_step, again->hot_at_iteration, f.first_fused_iteration);
  CHECK(hot_step > 0);
  CHECK(fused_step == hot_step + 1);
  CHECK(f.compiled);
  int gpu_groups = 0;
  for (const auto& g : f.groups) gpu_groups += g.gpu ? 1 : 0;
  CHECK(f.kernels_from_cache == gpu_groups);
  CHECK(f.fused_iterations >= 30);
  check_equal_to_eager(got, 40);

  // 3. A kept trace that differs from the loop's where the plan reads it (whether a fused group's
  // own output was held at the iteration's end: a kernel built from the kept one may skip writing
  // it): not taken; the plan is the loop's, and the loop's trace is kept in its place.
  const std::shared_ptr<const hd::Plan> plan = hd::thread_session()->executor.plan(sig);
  REQUIRE(plan != nullptr);
  REQUIRE(plan->ops.size() == trace->ops.size());
  hd::HotTrace changed = *trace;
  bool flipped = false;
  for (std::size_t i = 0; i < changed.ops.size() && !flipped; ++i) {
    hd::OpRecord& op = changed.ops[i];
    if (plan->ops[i].group < 0 || op.output_alive.empty() || op.output_alias.at(0) >= 0) continue;
    op.output_alive[0] = !op.output_alive[0];
    flipped = true;
  }
  REQUIRE(flipped);
  REQUIRE(hd::save_trace(cache.path(), changed).empty());
  hotpath::Stats third;
  hot_step = fused_step = -1;
  const auto refused = train_gpu_mlp(true, 40, &third, drained, kept);
  INFO(hotpath::format_stats(third));
  const hotpath::SignatureStats* third_hot = hot_signature(third);
  REQUIRE(third_hot != nullptr);
  CHECK_FALSE(third_hot->fusion.prepared);
  CHECK(third_hot->fusion.fused_iterations >= 25);
  check_equal_to_eager(refused, 40);
  hd::CompileWorker::instance().drain();
  const std::optional<hd::HotTrace> rewritten = hd::load_trace(cache.path(), sig, &why);
  REQUIRE(rewritten.has_value());
  CHECK(hd::plan_input_difference(*rewritten, *trace).empty());
}
