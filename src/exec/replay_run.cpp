// The executor's side of CUDA graph replay (exec/replay.h holds the captures): when an armed
// iteration is captured or replayed, and what a plan's launches and divergences mean for it.
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <algorithm>
#include <chrono>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/log.h"
#include "dispatch/hook_key.h"
#include "driver/cuda_driver.h"
#include "exec/executor.h"
#include "exec/replay.h"

namespace hotpath::detail {
namespace {

// An op's returns on `stack` (the tensors among them, a list's in order, as the recorder numbers
// an op's outputs) into the replay's table of values.
void note_returned(ReplayValues& values, std::size_t index, const torch::jit::Stack& stack,
                   std::size_t nret, bool trusted) {
  c10::SmallVector<const at::TensorBase*, 4> outputs;
  for_each_returned(stack, nret,
                    [&](const at::TensorBase& t, std::ptrdiff_t) { outputs.push_back(&t); });
  values.returned(index, outputs, trusted);
}

}  // namespace

bool Executor::replay_eligible(const Plan& plan) const {
  // Replay runs what the plan runs in its final form: every group on its own kernel, nothing
  // waiting for NVRTC, nothing left to the interpreter; and only a plan that has run whole for a
  // while (a loop that leaves its plan would leave its graphs too).
  if (config_.verify || plan.device_index < 0 || !plan.replay_off.empty()) return false;
  const std::int64_t after = plan.replay_held          ? kReplayHeldAtMost
                             : plan.replay_kept_before ? kReplayAfterKnown
                                                       : kReplayAfter;
  if (plan.steady < after) return false;
  if (!plan.compiled.load(std::memory_order_acquire) || !graph_updates_available()) return false;
  bool fused = false;
  for (const PlanGroup& g : plan.groups) {
    if (!g.gpu) return false;
    if (g.active && !g.eager_only && g.state->load(std::memory_order_acquire) != kLoaded)
      return false;
    fused = fused || (g.active && !g.eager_only);
  }
  // With every group off the plan runs eager (the governor timing eager again): not replayed.
  return fused;
}

std::vector<std::uint32_t> Executor::capture_runs(const Plan& plan) {
  // The ops as this configuration runs them: a group that is off, or runs eagerly after a failed
  // launch, defers nothing.
  std::vector<int> groups(plan.ops.size(), -1);
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    const int gi = plan.ops[i].group;
    if (gi < 0) continue;
    const PlanGroup& g = plan.groups[static_cast<std::size_t>(gi)];
    if (g.active && !g.eager_only) groups[i] = gi;
  }
  return uncut_runs(groups);
}

bool Executor::flush_finished(std::size_t index) {
  std::vector<int> groups;
  for (const Deferred& d : deferred_) {
    if (std::find(groups.begin(), groups.end(), d.group) != groups.end()) continue;
    const PlanGroup& g = armed_->groups[static_cast<std::size_t>(d.group)];
    // A group with members still to come keeps the graph open.
    if (g.ops.empty() || static_cast<std::size_t>(g.ops.back()) >= index) return false;
    groups.push_back(d.group);
  }
  std::sort(groups.begin(), groups.end());
  run_together(groups);
  return deferred_.empty();
}

void Executor::arm_replay(Plan& plan) {
  if (!plan.requested_replay_off.empty() && plan.replay_off.empty())
    drop_replay(plan, plan.requested_replay_off);
  if (plan.replay && plan.replay->failed()) {
    drop_replay(plan, plan.replay_attempts >= kReplayAttempts ? plan.replay->failure() : "");
  } else if (plan.replay && plan.replay->epoch() != plan.epoch) {
    drop_replay(plan, "");  // the governor changed the groups: a new capture, later
    plan.replay_attempts = 0;
  }
  if (plan.replay && plan.replay->ready()) {
    set_mode(Mode::kReplay);
    plan.replay->begin_replay(iter_start_);
    plan.replay->let_go(replay_values_.begin(iter_start_));
    return;
  }
  const bool eligible = replay_eligible(plan);
  if (plan.replay && plan.replay->observing() && eligible) {
    try {
      plan.replay->begin_capture(iter_start_, capture_runs(plan));
    } catch (const std::exception& e) {
      plan.replay->fail(concat("a capture could not start: ", e.what()));
      return;
    }
    set_mode(Mode::kCapture);
    tiers_final_ = false;  // the capture costs the host: not an iteration the governor judges
    log_debug(concat("hotpath: signature ", plan.hex, ": capturing iteration ", iteration_,
                     " as CUDA graphs"));
    return;
  }
  if (plan.replay || !eligible || plan.replay_attempts >= kReplayAttempts) return;
  // The iteration before the capture notes where its inputs from outside are.
  ++plan.replay_attempts;
  const auto t0 = std::chrono::steady_clock::now();
  plan.replay = std::make_shared<Replay>(plan.device_index, plan.epoch, plan.ops.size(),
                                         config_.replay_graph_ops, config_.replay_launcher);
  plan.replay->set_moved(plan.replay_moved);
  // The first capture's pool as large as the earlier run's, if one said; a later capture's
  // (after a divergence, or new groups) as large as the last.
  if (plan.replay_pool_bytes > 0)
    plan.replay->set_pool_hint(plan.replay_pool_bytes, plan.replay_pool_small_bytes);
  else
    plan.replay->set_pool_hint(plan.replay_pool_hint, plan.replay_pool_small_hint);
  plan.replay->begin_observe(iter_start_);
  set_mode(Mode::kObserve);
  log_debug(concat("hotpath: signature ", plan.hex, ": iteration ", iteration_,
                   " observed before its capture (set up in ", ms_text(ms_since(t0)), ")"));
}

bool Executor::replay_step(const PlanOp& p, std::size_t index, const c10::OperatorHandle& op,
                           c10::DispatchKeySet keys, torch::jit::Stack* stack, const OpRecord& rec,
                           const TensorPtrs& inputs) {
  std::string why;
  // The guard that let the op in (Executor::guard, or the in-place twin's) named its inputs.
  const Replay::Step step = armed_->replay->replay_op(index, p, inputs, replay_refs_,
                                                      written_flags(rec), op, keys, stack, why);
  if (step == Replay::Step::kLeave) {
    diverge(concat("op ", index, ": ", full_name(p.op_name, p.op_overload),
                   " differs from the captured iteration's: ", why));
    return false;
  }
  returning_.store(static_cast<std::int64_t>(index), std::memory_order_relaxed);
  replayed_op();
  return step == Replay::Step::kHandled;
}

void Executor::replayed_op() {
  launched_ = true;
  if (armed_->first_fused_iteration < 0) armed_->first_fused_iteration = iteration_;
  if (cursor_ == armed_->ops.size()) complete_iteration();
}

Executor::Fast Executor::fast_replay(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                                     torch::jit::Stack* stack, const FastInputs& in,
                                     std::uint64_t& key) {
  std::lock_guard<std::mutex> lock(mu_);
  returning_.store(-1, std::memory_order_relaxed);
  // The iteration's first op arms it through the full path; a guard that fails, an in-place
  // twin (Executor::in_place_twin) or anything else out of the ordinary goes there too.
  if (!armed_ || mode_ != Mode::kReplay || cursor_ == 0 || cursor_ >= armed_->ops.size())
    return Fast::kDeclined;
  const std::size_t index = cursor_;
  const PlanOp& p = armed_->ops[index];
  if (in.args_key != p.args_key || in.tensors.size() != p.refs.size() ||
      p.metas.size() != p.refs.size())
    return Fast::kDeclined;
  if (std::string_view(op.schema().name()) != p.op_name ||
      std::string_view(op.schema().overload_name()) != p.op_overload)
    return Fast::kDeclined;
  if (!guard_replayed(p, in.tensors, in.written, true)) return Fast::kDeclined;
  host_lap(kGuardPart);
  std::string why;
  const Replay::Step step = armed_->replay->replay_op(index, p, in.tensors, replay_refs_,
                                                      in.written, op, keys, stack, why);
  // The full path meets the same op in the same state and leaves the plan there, logging why.
  if (step == Replay::Step::kLeave) return Fast::kDeclined;
  ++cursor_;
  Fast how = Fast::kHandled;
  if (step == Replay::Step::kHandled) {
    // Handed its outputs: they are on the stack. Tensors of its own (not an argument returned)
    // have the capture's metadata.
    key = p.key;
    note_returned(replay_values_, index, *stack, op.schema().returns().size(), p.out_alias < 0);
  } else {
    // Run below the hook: it returns its outputs later (returned()). A view without position
    // arguments makes them from inputs and arguments checked above: the plan's metadata.
    returning_.store(static_cast<std::int64_t>(index), std::memory_order_relaxed);
    how = !in.positional && armed_->replay->view(index) ? Fast::kView : Fast::kEager;
    key = how == Fast::kView ? p.key : p.input_key;
  }
  replayed_op();
  return how;
}

bool Executor::guard_replayed(const PlanOp& p, c10::ArrayRef<const at::TensorBase*> inputs,
                              c10::ArrayRef<std::uint8_t> written, bool check_meta) {
  if (inputs.size() != p.refs.size()) return false;
  replay_refs_.assign(inputs.size(), ValueRef{});
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    const at::TensorBase& t = *inputs[k];
    bool trusted = false;
    if (t.defined() && !replay_values_.matches(p.refs[k], t, replay_refs_[k], &trusted))
      return false;
    if (check_meta && !trusted) {
      // Another layout than strided: its metadata hash is the layout's alone; the full path's
      // guard takes it.
      if (t.defined() && t.layout() != c10::kStrided) return false;
      if (k >= p.metas.size() || input_meta_key(t) != p.metas[k]) return false;
    }
  }
  // What the op writes is checked from here on (an in-place metadata change is a write).
  for (std::size_t k = 0; k < inputs.size() && k < written.size(); ++k)
    if (written[k] != 0 && inputs[k]->defined()) replay_values_.written(*inputs[k]);
  return true;
}

void Executor::returned(c10::ArrayRef<const at::TensorBase*> outputs, bool trusted) {
  if (returning_.load(std::memory_order_relaxed) < 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  const std::int64_t index = returning_.exchange(-1, std::memory_order_relaxed);
  // The iteration's last op completed it: no later op of it looks its outputs up.
  if (index < 0 || mode_ != Mode::kReplay || !armed_) return;
  replay_values_.returned(static_cast<std::size_t>(index), outputs, trusted);
}

void Executor::capture_eager(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                             torch::jit::Stack* stack, std::size_t index) {
  const std::size_t nargs = op.schema().arguments().size();
  const std::size_t base = stack->size() - nargs;
  torch::jit::Stack args(stack->begin() + static_cast<std::ptrdiff_t>(base), stack->end());
  c10::impl::ExcludeDispatchKeyGuard no_hook(kHookKey);
  if (armed_->replay->failed()) {
    op.redispatchBoxed(keys, stack);
    return;
  }
  armed_->replay->before_own_run(index, op, args);
  try {
    op.redispatchBoxed(keys, stack);  // the op itself, as the hook would run it
  } catch (const std::exception& e) {
    // Something a capture disturbs (a random number generator that takes part in it): the
    // capture stops, and the op runs again as it would have without it. An error of its own
    // comes back as it is.
    armed_->replay->fail(concat("op ", index, " (",
                                full_name(op.schema().name(), op.schema().overload_name()),
                                ") failed beside the capture: ", e.what()));
    stack->resize(base);
    stack->insert(stack->end(), args.begin(), args.end());
    op.redispatchBoxed(keys, stack);
    return;
  }
  armed_->replay->after_own_run(index);
  armed_->replay->capture_eager(index, op, keys, std::move(args), *stack);
}

void Executor::capture_launches(const std::vector<PlanGroup*>& groups,
                                const std::vector<const std::vector<Deferred*>*>& members,
                                const std::vector<const LaunchArgs*>& args, bool joint) {
  std::vector<Replay::Launch> launches(groups.size());
  for (std::size_t k = 0; k < groups.size(); ++k) {
    // What the capture needs of each: its members, scalars, grid and outputs.
    Replay::Launch& c = launches[k];
    PlanGroup& g = *groups[k];
    const LaunchArgs& l = *args[k];
    c.group = &g;
    c.scalars = l.scalars;
    c.blocks = static_cast<unsigned>(l.blocks);
    c.numel64 = l.numel64;
    c.numel32 = l.numel32;
    c.vector_ok = l.vector_ok;
    c.workspace = g.workspace;
    c.launches = &g.launches;
    for (const Deferred* d : *members[k]) {
      const PlanOp& p = armed_->ops[static_cast<std::size_t>(d->index)];
      c.indices.push_back(static_cast<std::size_t>(d->index));
      c.members.push_back(&p);
      std::vector<at::Tensor> outs;
      for (std::size_t o = 0; o < p.outs.size(); ++o) outs.push_back(d->output(o));
      c.outputs.push_back(std::move(outs));
    }
  }
  if (joint)
    armed_->replay->capture_batch(launches);
  else if (!launches.empty())
    armed_->replay->capture_launch(launches.front());
}

bool Executor::before_any_work() const {
  if (mode_ == Mode::kReplay) return !armed_->replay->handed_any();
  if (mode_ == Mode::kCapture) return armed_->replay->nothing_captured() && deferred_.empty();
  return !launched_ && deferred_.empty();
}

void Executor::leave_replay(const std::string& why, bool another) {
  Plan& plan = *armed_;
  const Mode mode = mode_;
  set_mode(Mode::kPlan);
  if (mode == Mode::kObserve) return;  // the next iteration that runs whole is captured
  if (mode == Mode::kCapture) {
    if (another) {
      drop_replay(plan, "");
      if (plan.replay_attempts > 0) --plan.replay_attempts;
      return;
    }
    plan.replay->fail(concat("the captured iteration left the plan (", why, ")"));
    return;
  }
  plan.replay->leave();
  if (const auto moved = plan.replay->moved_input();
      moved && plan.replay_moved.size() < kReplayRelearns) {
    // An input that moves: captured again, reading a copy of it (not a divergence of replay's).
    plan.replay_moved.insert(*moved);
    drop_replay(plan, "");
    plan.replay_attempts = 0;
    return;
  }
  if (another) return;  // replay goes on with the plan's next iteration
  if (++plan.replay_divergences >= kReplayDivergences)
    drop_replay(plan, concat(plan.replay_divergences,
                             " replayed iterations left the plan; the last: ", why));
}

void Executor::drop_replay(Plan& plan, const std::string& why) {
  if (!why.empty()) {
    plan.replay_off = why;
    log_info(concat("hotpath: signature ", plan.hex, ": CUDA graph replay is off: ", why));
  }
  if (!plan.replay) return;
  plan.replayed += plan.replay->replayed();
  plan.replay_rescued += plan.replay->rescued();
  plan.replay_repointed += plan.replay->repointed();
  plan.replay_launcher_launches += plan.replay->launcher_launches();
  plan.replay_premade_outputs += plan.replay->premade_outputs();
  plan.replay_launcher_ms += plan.replay->launcher_us() * 1e-3;
  plan.replay_pool_bytes = plan.replay->pool_bytes();
  plan.replay_pool_small_bytes = plan.replay->pool_small_bytes();
  if (plan.replay->capture_ms() > 0) {
    ++plan.replay_captures;
    plan.replay_capture_ms += plan.replay->capture_ms();
    plan.replay_capture_segments = plan.replay->capture_cost().mallocs;
  }
  plan.replay.reset();  // what the program still holds on the graphs' memory is copied out
}

}  // namespace hotpath::detail
