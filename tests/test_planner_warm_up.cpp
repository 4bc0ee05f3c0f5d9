// The planner's warm-up (exec/planner_warm_up.cpp): the made-up step the compile worker plans at
// enable time, so that a known winner's first plan does not pay for code that never ran.
#include <set>
#include <string>

#include "fusion_support.h"

TEST_CASE("the planner's warm-up plans every kind of group, as a GPU plan, and its kernels compile",
          "[fusion][compile]") {
  // The made-up step the compile worker plans at enable time (exec/planner_warm_up.cpp) must
  // reach the code a real plan runs: pointwise, row, column and total kernels, a batch's multi
  // entry and the cache keys. A change to the op table or the partition that left one of them
  // out (or made the trace unplannable) would make the warm-up warm less than it says.
  using namespace hotpath::detail;
  Plan plan;
  plan.hex = "test";
  const HotTrace trace = planner_warm_up_trace();
  const int covered =
      analyse_plan(plan, trace, std::nullopt, hotpath::Config{}, DeviceInfo{132, 90});
  INFO(plan.partition.to_text(*plan.graph));
  CHECK(covered == static_cast<int>(trace.ops.size()));  // every op in a group
  std::set<std::string> kinds;
  for (std::size_t k = 0; k < plan.groups.size(); ++k) {
    const PlanGroup& g = plan.groups[k];
    const FusionGroup& fg = plan.partition.groups[k];
    CAPTURE(g.name);
    CHECK(g.gpu);
    CHECK(!g.cache_key.empty());
    kinds.insert(fg.rows()      ? "rows"
                 : fg.columns() ? "columns"
                 : fg.total()   ? "total"
                                : "pointwise");
    CHECK(nvrtc_compile(g.spec.source, g.spec.name, 90, runtime_headers(), "").cubin.size() > 0);
  }
  CHECK(kinds == std::set<std::string>{"rows", "columns", "total", "pointwise"});
  REQUIRE(plan.batches.size() == 1);
  CHECK(plan.batches[0].size() == 2);  // the two parameters' updates, one launch
  CHECK(!plan.groups[static_cast<std::size_t>(plan.batches[0][0])].spec.multi_name.empty());
  CHECK(warm_up_planner(90) == plan.groups.size());
}
