// Planning: a hot trace becomes a plan (graph, partition, each group's kernel source, which of
// its tensors may be skipped, batches of groups launched together). Free functions that touch
// nothing but the plan: they run on the compile worker; the executor (exec/executor.h) runs
// the result.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compile/kernel_builder.h"
#include "driver/cuda_driver.h"
#include "exec/plan.h"
#include "hotpath/hotpath.h"
#include "trace/hot_trace.h"

namespace hotpath::detail {

// Whether any op of `trace` reads a CUDA tensor: a plan for it has kernels to compile.
bool reads_cuda(const HotTrace& trace);

// Graph, partition and kernel sources of `trace` into `plan` (whose signature and hex are set).
// `remembered`: an earlier run's verdict (groups that lost then are not compiled).
void build_plan(Plan& plan, const HotTrace& trace, const std::optional<PlanPrior>& remembered,
                const Config& config);
// build_plan's work without its log lines: the number of ops its groups cover. `device`: the
// GPU's facts, else asked of the driver when the trace has a GPU group.
int analyse_plan(Plan& plan, const HotTrace& trace, const std::optional<PlanPrior>& remembered,
                 const Config& config, const std::optional<DeviceInfo>& device);

// The planner's code run once, on a made-up training step for a GPU of `arch` (no CUDA call),
// so that the first real plan does not pay for code that never ran (exec/planner_warm_up.cpp):
// the number of groups it planned. Its trace, for tests: a forward pass (pointwise, a row op, a
// loss to one value), its backward (pointwise, a column sum), AdamW's update of two parameters
// of one size (a batch).
std::size_t warm_up_planner(int arch);
HotTrace planner_warm_up_trace();

// Marks the plan's batches (Plan::batches): groups that share one pointwise kernel and follow
// each other with no other op between them (an optimizer's update of each parameter) launch
// together, at the last one's last op, in one launch of the kernel's multi entry. Only GPU
// groups; none of a batch may touch what another writes (their order is then the GPU's).
void plan_batches(const Graph& g, Plan& plan);

// The order in which the plan's GPU groups get their own kernels (compiled, loaded, published):
// what saves the most first. A group the interpreter cannot run (a row or column kernel) runs
// eagerly until its kernel is in, so those come first; then the rest; within each, the groups
// that replace the most ops' launches first (ties: plan order).
std::vector<int> compile_order(const Plan& plan);

// The plan's distinct kernels to build, in compile_order: a kernel that groups share is listed
// once, and a group an earlier run turned off (PlanGroup::active_default false) has none.
// `job_of`, if given, gets each job's index by cache key.
std::vector<KernelJob> kernel_jobs(const Plan& plan,
                                   std::map<std::string, std::size_t>* job_of = nullptr);

}  // namespace hotpath::detail
