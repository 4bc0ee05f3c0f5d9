#include "exec/executor.h"

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/zeros.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "codegen/interpreter.h"
#include "codegen/kernel.h"
#include "common/error.h"
#include "common/faults.h"
#include "common/fs.h"
#include "common/hash.h"
#include "common/log.h"
#include "compile/worker.h"
#include "dispatch/hook_key.h"
#include "exec/planner.h"
#include "exec/replay.h"
#include "fusion/partition.h"
#include "ir/graph.h"
#include "trace/signature.h"

namespace hotpath::detail {
namespace {

constexpr std::int64_t kDivergenceLogs = 5;

}  // namespace

void Executor::apply_requests(Plan& plan) {
  plan.take_stand_in_turn();
  if (plan.requested_epoch == plan.epoch) return;
  for (std::size_t g = 0; g < plan.groups.size() && g < plan.requested_active.size(); ++g)
    plan.groups[g].active = plan.requested_active[g] && plan.groups[g].active_default;
  plan.epoch = plan.requested_epoch;
  // A new configuration runs a while before it is captured: a governor's trial or rebase lasts
  // less than kReplayAfter iterations, and times the groups as they run unreplayed.
  plan.steady = 0;
}

bool Executor::try_arm() {
  // Asked for every op while plans are ready and none is armed: most answer without a lock.
  if (recorder_.next_index() != recorder_.expected_start()) return false;
  const StreamPosition pos = recorder_.position();
  if (pos.expected_start != pos.next_op) return false;
  const auto it = plans_.find(pos.predicted_signature);
  if (it == plans_.end() || !it->second->ready || it->second->groups.empty() ||
      it->second->reverted)
    return false;
  apply_requests(*it->second);
  Plan& plan = *it->second;
  // An interpreter loaded after the plan was built stands in from now on.
  if (!plan.interpreter && plan.device_index >= 0 && !plan.compiled.load(std::memory_order_acquire))
    plan.interpreter = loaded_interpreter(plan.device_index);
  // (Once every kernel is loaded or failed nothing waits: not looked at in the steady state.)
  if (!plan.compiled.load(std::memory_order_acquire) && plan.only_waits()) {
    waited_unarmed(plan, pos.next_op);
    return false;
  }
  armed_ = it->second;
  cursor_ = 0;
  launched_ = false;
  waited_ = false;
  stood_in_ = false;
  tiers_final_ = true;
  iter_start_ = pos.next_op;
  iteration_ = pos.iterations + 1;
  outside_.clear();
  set_mode(Mode::kPlan);
  if (config_.replay) arm_replay(plan);
  return true;
}

bool Executor::guard(const PlanOp& p, const OpRecord& rec, const TensorPtrs& inputs,
                     bool check_key) {
  if (check_key && rec.input_key != p.input_key) return false;
  if (mode_ == Mode::kReplay) return guard_replayed(p, inputs, written_flags(rec), false);
  return guard_flow(
      p, rec.inputs.size(), [&](std::size_t k) { return rec.inputs[k].meta.defined; },
      [&](std::size_t k) { return rec.inputs[k].ref; });
}

bool Executor::guard_flow(const PlanOp& p, std::size_t inputs,
                          c10::function_ref<bool(std::size_t)> defined,
                          c10::function_ref<ValueRef(std::size_t)> ref) {
  if (inputs != p.refs.size()) return false;
  for (std::size_t k = 0; k < p.refs.size(); ++k) {
    if (!defined(k)) continue;
    const ValueRef e = p.refs[k];
    const ValueRef a = ref(k);
    if (e.producer >= 0) {
      if (a.producer != iter_start_ + e.producer || a.output != e.output) return false;
    } else {
      if (a.producer >= iter_start_) return false;
      const auto it = outside_.emplace(a, static_cast<std::int64_t>(outside_.size())).first;
      if (it->second != -e.producer - 1) return false;
    }
  }
  return true;
}

std::string Executor::mismatch(const PlanOp& p, const OpRecord& rec,
                               const TensorPtrs& inputs) const {
  if (rec.input_key != p.input_key) return "its inputs' metadata or arguments differ";
  if (rec.inputs.size() != p.refs.size())
    return concat(rec.inputs.size(), " tensor inputs where the plan has ", p.refs.size());
  auto where = [&](const ValueRef& r) {
    if (r.producer >= iter_start_)
      return concat("output ", r.output, " of this iteration's op ", r.producer - iter_start_);
    if (r.producer < 0) return concat("a tensor first seen outside the loop (#", -r.producer, ")");
    return concat("output ", r.output, " of op ", r.producer - iter_start_,
                  " (an earlier iteration's)");
  };
  for (std::size_t k = 0; k < p.refs.size(); ++k) {
    if (!rec.inputs[k].meta.defined) continue;
    const ValueRef e = p.refs[k];
    if (mode_ == Mode::kReplay) {  // checked by identity (exec/replay_values.h)
      if (k < inputs.size() && !replay_values_.would_match(e, *inputs[k]))
        return concat("input ", k, ": not ",
                      e.producer >= 0
                          ? concat("output ", e.output, " of this iteration's op ", e.producer)
                          : concat("the iteration's outside value #", -e.producer - 1),
                      " (a replayed iteration's values are checked by identity)");
      continue;
    }
    const ValueRef a = rec.inputs[k].ref;
    if (e.producer >= 0) {
      if (a.producer != iter_start_ + e.producer || a.output != e.output)
        return concat("input ", k, ": expected output ", e.output, " of this iteration's op ",
                      e.producer, ", got ", where(a));
      continue;
    }
    if (a.producer >= iter_start_)
      return concat("input ", k, ": expected the iteration's outside value #", -e.producer - 1,
                    ", got ", where(a));
    const auto it = outside_.find(a);
    if (it != outside_.end() && it->second != -e.producer - 1)
      return concat("input ", k, ": expected the iteration's outside value #", -e.producer - 1,
                    ", got its outside value #", it->second, " (", where(a), ")");
  }
  return "its inputs differ";
}

const c10::OperatorHandle* Executor::in_place_twin(const PlanOp& p, OpRecord& rec,
                                                   const TensorPtrs& inputs,
                                                   const torch::jit::Stack& stack,
                                                   std::size_t index) {
  // Autograd accumulates a gradient into its buffer in place (add_) only when nothing else holds
  // the buffer; the ops a plan defers hold their arguments until their group runs, so the same
  // loop can ask for an out-of-place add where the trace has add_. When only autograd holds the
  // buffer (eager would have added in place), the recorded add_ runs instead: the same result.
  static const c10::OperatorHandle add_ =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::add_", "Tensor");
  if (p.op_name != "aten::add_" || p.op_overload != "Tensor" || rec.name != "aten::add" ||
      rec.overload != "Tensor")
    return nullptr;
  if (!armed_ || armed_->graph == nullptr || rec.inputs.size() != p.refs.size()) return nullptr;
  const Node& n = armed_->graph->node(static_cast<int>(index));
  for (std::size_t k = 0; k < rec.inputs.size(); ++k) {
    const int v = n.input_at(rec.inputs[k].argument);
    if (v < 0) return nullptr;
    const TensorMeta& want = armed_->graph->value(v).meta;
    const TensorMeta& got = rec.inputs[k].meta;
    if (got.dtype != want.dtype || got.device != want.device || got.sizes != want.sizes ||
        got.strides != want.strides || got.storage_offset != want.storage_offset)
      return nullptr;
  }
  const std::size_t nargs = add_.schema().arguments().size();
  if (stack.size() < nargs || !stack[stack.size() - nargs].isTensor()) return nullptr;
  const at::Tensor& self = stack[stack.size() - nargs].toTensor();
  int ours = 0, views = 0;
  for (const Deferred& d : deferred_) ours += count_refs(self, d.args);
  if (mode_ == Mode::kReplay) {
    // A replay defers every op: views of the buffer its readers still hold are ours as well.
    const Replay::Held held = armed_->replay->held(self);
    ours += held.references + held.views;
    views = held.views;
  }
  for (std::size_t k = stack.size() - nargs; k < stack.size(); ++k) {
    if (stack[k].isTensor() &&
        stack[k].toTensor().unsafeGetTensorImpl() == self.unsafeGetTensorImpl())
      ++ours;
  }
  const bool only_autograd = self.use_count() == static_cast<std::size_t>(ours) + 1 &&
                             self.storage().use_count() == static_cast<std::size_t>(views) + 1 &&
                             self.is_non_overlapping_and_dense();
  if (mode_ == Mode::kReplay && !only_autograd && divergence_logs_ < kDivergenceLogs)
    log_debug(concat("hotpath: replay: add_ refused: held ", self.use_count(), " times (", ours,
                     " by deferred ops and the stack), storage ", self.storage().use_count()));
  if (!only_autograd || !guard(p, rec, inputs, false)) return nullptr;
  // Recorded as the plan's op, input key too (or a plan built from it would take add for add_).
  rec.name = p.op_name;
  rec.overload = p.op_overload;
  rec.input_key = p.input_key;
  rec.args_key = p.args_key;
  for (std::size_t k = 0; k < rec.inputs.size() && k < p.metas.size(); ++k)
    rec.inputs[k].meta_key = p.metas[k];
  rec.planned_key = p.key;
  rec.planned_alias = p.out_alias;
  return &add_;
}

void Executor::diverge(const std::string& why, bool other) {
  const bool another = other && before_any_work();  // no sign the plan's own iterations stop short
  if (mode_ == Mode::kReplay) {
    recorder_.note_replayed(iter_start_, static_cast<std::int64_t>(armed_->ops.size()),
                            armed_->signature, /*left=*/true);
  }
  if (mode_ != Mode::kPlan) leave_replay(why, another);
  materialize_all();
  restore_unwritten(true);  // the op that left the plan may read a value a kernel skipped
  ++armed_->divergences;
  if (!another) armed_->steady = 0;
  completed_[completed_next_++ % std::size(completed_)] =
      Completed{armed_->signature, iter_start_,
                armed_->epoch,
                /*fused=*/true,    tiers_final_,
                /*diverged=*/true, static_cast<std::int64_t>(armed_->ops.size()),
                stood_in_,         waited_};
  armed_->last_divergence = concat("iteration ", iteration_, ", ", why);
  if (divergence_logs_++ < kDivergenceLogs) {
    log_info(
        concat("hotpath: signature ", armed_->hex, ": iteration ", iteration_, " left the plan (",
               why, "); it finishes eagerly",
               divergence_logs_ == kDivergenceLogs ? " (further divergences are not logged)" : ""));
  }
  disarm();
}

bool Executor::intercept(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                         torch::jit::Stack* stack, OpRecord& rec, const TensorPtrs& inputs) {
  if (ready_plans_->load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lock(mu_);
  returning_.store(-1, std::memory_order_relaxed);
  if (!armed_ && !try_arm()) {
    // Between plans (a step's tail): an op that reads a value a kernel skipped gets it computed.
    if (!unwritten_.empty()) restore_read(*stack, op.schema().arguments().size());
    return false;
  }
  const std::size_t index = cursor_;
  if (index == 0 && !unwritten_.empty()) restore_unwritten(false);  // the last iteration is over
  const PlanOp& p = armed_->ops[index];
  const c10::OperatorHandle* as = &op;
  if (!guard(p, rec, inputs, true)) {
    as = in_place_twin(p, rec, inputs, *stack, index);
    if (as == nullptr) {
      const std::string want = full_name(p.op_name, p.op_overload);
      const std::string got = full_name(rec.name, rec.overload);
      diverge(concat("op ", index, ": expected ", want, ", got ", got,
                     got == want ? concat(" with other inputs: ", mismatch(p, rec, inputs)) : ""),
              /*other=*/true);
      return false;
    }
  }
  ++cursor_;
  host_lap(kGuardPart);
  if (mode_ == Mode::kReplay) return replay_step(p, index, *as, keys, stack, rec, inputs);
  bool handled = false;
  const PlanGroup* group =
      p.group >= 0 ? &armed_->groups[static_cast<std::size_t>(p.group)] : nullptr;
  const bool fused = group != nullptr && group->active && !group->eager_only;
  if (mode_ == Mode::kObserve) armed_->replay->observe(index, rec, inputs);
  if (mode_ == Mode::kCapture) {
    // A batch's groups that are complete launch now where the capture would cut a graph
    // before this op: the GPU starts them while the host goes through the rest.
    const bool random = draws_random(as->schema(), p.op_name);  // a graph of its own (capture_op)
    if (!deferred_.empty() && (random || armed_->replay->cut_wanted(index))) flush_finished(index);
    if (random && fused) armed_->replay->fail(concat("op ", index, " draws random numbers, fused"));
    armed_->replay->capture_op(index, p, rec, inputs, *as, deferred_.empty());
    if (!fused) {
      capture_eager(*as, keys, stack, index);  // runs it, then captures it
      handled = true;
    }
  }
  if (fused) {
    try {
      defer(*as, keys, stack, p, static_cast<int>(index));
    } catch (const c10::OutOfMemoryError& e) {
      // No memory for a fused group's output: what is pending runs eagerly, the buffers the
      // plan keeps for its temporaries are let go, and this op and the rest of the iteration
      // run as eager would (if eager has no memory either, the loop sees eager's error).
      for (PlanOp& op : armed_->ops) op.slots.assign(op.slots.size(), nullptr);
      diverge(concat("out of memory for the output of op ", index, " (",
                     full_name(p.op_name, p.op_overload), ")"));
      return false;
    }
    handled = true;
    if (p.launch) {
      host_lap(kDeferPart);
      run_group(p.group);
      host_lap(kLaunchPart);
    }
  }
  if (p.batch >= 0) {
    host_lap(kDeferPart);
    run_batch(p.batch);
    host_lap(kLaunchPart);
  }
  if (cursor_ == armed_->ops.size()) complete_iteration();
  return handled;
}

void Executor::defer(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                     torch::jit::Stack* stack, const PlanOp& p, int index) {
  if (fault_armed(kFaultOom))
    TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory (injected: HOTPATH_FAULTS=oom)");
  // Built where it stays (a Deferred holds its arguments inline: moving it copies them).
  Deferred& d =
      deferred_.emplace_back(Deferred{op, keys, index, p.group, {}, p.out_alias, {}, {}, {}});
  try {
    const std::size_t nargs = op.schema().arguments().size();
    for (auto it = stack->end() - static_cast<std::ptrdiff_t>(nargs); it != stack->end(); ++it)
      d.args.push_back(std::move(*it));
    torch::jit::drop(*stack, nargs);
    if (p.out_alias >= 0) {
      stack->emplace_back(d.args[static_cast<std::size_t>(p.out_alias)]);
      return;
    }
    const bool gpu = armed_->groups[static_cast<std::size_t>(p.group)].gpu;
    for (std::size_t k = 0; k < p.outs.size(); ++k) {
      const TensorMeta& m = p.outs[k];
      if (!m.defined) {  // an output eager leaves undefined (a gradient not asked for)
        d.made.emplace_back(at::Tensor().getIntrusivePtr());
        d.stores.emplace_back(c10::intrusive_ptr<c10::StorageImpl>());
        stack->emplace_back(at::Tensor());
        continue;
      }
      at::Tensor out = gpu && p.slotted[k]
                           ? OutputSlot::make(p.slots[k], m)
                           : at::empty_strided(m.sizes, m.strides,
                                               at::TensorOptions().dtype(m.dtype).device(m.device));
      d.made.emplace_back(out.getIntrusivePtr());
      d.stores.emplace_back(out.storage().getWeakStorageImpl());
      stack->emplace_back(std::move(out));
    }
  } catch (...) {
    deferred_.pop_back();  // the op fails as it would eagerly; nothing half-deferred stays
    throw;
  }
}

std::vector<Executor::Deferred*> Executor::members_of(int group) {
  std::vector<Deferred*> members;
  for (Deferred& d : deferred_) {
    if (d.group == group) members.push_back(&d);
  }
  return members;
}

void Executor::forget_group(int group) {
  deferred_.erase(std::remove_if(deferred_.begin(), deferred_.end(),
                                 [&](const Deferred& d) { return d.group == group; }),
                  deferred_.end());
}

void Executor::run_group(int group) {
  const std::vector<Deferred*> members = members_of(group);
  PlanGroup& g = armed_->groups[static_cast<std::size_t>(group)];
  if (!g.gpu) {
    launched_ = true;  // a CPU group's "kernel" is ATen's, run by materialize
    if (armed_->first_fused_iteration < 0) armed_->first_fused_iteration = iteration_;
  }
  const bool launched = g.gpu && launch(g, members);
  if (!launched && mode_ == Mode::kCapture)
    armed_->replay->fail(concat("group ", g.name, " ran eagerly in the captured iteration"));
  if (!launched) {
    materialize(members);
    ++g.eager_runs;
  }
  if (launched || !g.gpu) slow_fault(group);  // a CPU group's ATen ops are its fused run
  forget_group(group);
}

bool Executor::fill(PlanGroup& g, const std::vector<Deferred*>& members, bool own_kernel,
                    LaunchArgs& l) {
  const auto& args = g.spec.args;
  l.ptrs.assign(args.size(), nullptr);
  l.scalars.assign(args.size(), 0.0f);
  l.tensors.assign(args.size(), at::Tensor());
  l.numel64 = g.spec.numel;
  l.numel32 = static_cast<int>(g.spec.numel);
  l.vector_ok = g.spec.vec > 1 ? 1 : 0;
  for (Deferred* d : members) revive(*d);
  const std::size_t unwritten_before = unwritten_.size();
  bool misaligned = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const KernelArg& a = args[i];
    const Deferred& m = *members[static_cast<std::size_t>(a.member)];
    if (a.kind == KernelArg::Kind::Scalar) {
      l.scalars[i] =
          static_cast<float>(m.args[static_cast<std::size_t>(a.argument)].toScalar().toDouble());
      continue;
    }
    // A strong reference for the launch (one more use of a tensor the group made).
    const at::Tensor t = m.tensor(a);
    if (!t.defined()) {
      if (!a.optional) return false;  // cannot happen: the last member's output is on the stack
      continue;                       // nobody holds it: nothing to write
    }
    bool pass = true;
    if (a.optional) {
      int ours = 1;  // `t`
      for (const Deferred* d : members) ours += count_refs(t, d->args);
      // Nobody else holds it: nothing can read it. Someone does, but the trace says it dies
      // unread: skip it, and keep what restores it should that turn out wrong.
      // A second tensor on its storage (autograd's saved copy of an output) reads it too.
      const bool shared = t.storage().use_count() > 1;
      pass = t.use_count() > static_cast<std::size_t>(ours) || shared;
      if (pass && !shared && !g.speculative.empty() && g.speculative[i]) {
        pass = false;
        speculate(t, g, i, members);
      }
    }
    l.tensors[i] = t;
    l.ptrs[i] = pass ? t.data_ptr() : nullptr;
    const auto addr = reinterpret_cast<std::uintptr_t>(l.ptrs[i]);
    // A kernel that follows eager's path for aligned data (an rms_norm's) meets data that is not.
    misaligned = misaligned || (pass && a.align_bytes > 0 &&
                                addr % static_cast<std::uintptr_t>(a.align_bytes) != 0);
    if (pass && a.linear && g.spec.vec_bytes > 0 &&
        addr % static_cast<std::uintptr_t>(g.spec.vec_bytes) != 0)
      l.vector_ok = 0;
  }
  // Element-wise in-place updates are only safe when a written tensor does not partly overlap
  // another operand (eager would see every element updated before the next op reads it).
  bool eager = misaligned;
  for (std::size_t i = 0; i < args.size() && !eager; ++i) {
    if (!args[i].written || l.ptrs[i] == nullptr) continue;
    for (std::size_t j = 0; j < args.size() && !eager; ++j) {
      if (j == i || args[j].kind != KernelArg::Kind::Tensor || !l.tensors[j].defined()) continue;
      eager = l.tensors[i].storage().is_alias_of(l.tensors[j].storage());
    }
  }
  if (eager) {
    unwritten_.erase(unwritten_.begin() + static_cast<std::ptrdiff_t>(unwritten_before),
                     unwritten_.end());  // materialised instead: all written
    return false;
  }
  l.blocks = own_kernel ? launch_blocks(g.spec, armed_->sm_count)
                        : interpreter_blocks(g.spec.numel, armed_->sm_count);
  if (own_kernel && g.spec.fixed_blocks > 0) {  // a workspace laid out for its fixed grid
    if (!g.workspace.defined()) {
      g.workspace =
          at::zeros({g.spec.workspace_floats},
                    at::TensorOptions()
                        .dtype(at::kFloat)
                        .device(c10::Device(c10::kCUDA,
                                            static_cast<c10::DeviceIndex>(armed_->device_index))));
    }
    l.partial = g.workspace.data_ptr<float>();
    l.done = reinterpret_cast<unsigned*>(l.partial + g.spec.counters_at);  // 0.0f is 0u
  }
  if (config_.verify) prepare_verify(g, l);
  return true;
}

void Executor::materialize(const std::vector<Deferred*>& members) {
  c10::impl::ExcludeDispatchKeyGuard no_hook(kHookKey);
  // Below autograd, as the op's kernel ran when it was deferred: a kernel that calls other ops
  // (mul_.Scalar calls mul.out) must not meet autograd again on a tensor that requires grad.
  at::AutoDispatchBelowADInplaceOrView below;
  for (Deferred* d : members) {
    revive(*d);
    torch::jit::Stack s(d->args.begin(), d->args.end());
    d->op.redispatchBoxed(d->keys, &s);
    if (d->out_alias >= 0) continue;
    for (std::size_t k = 0; k < d->made.size(); ++k) {
      if (const at::Tensor out = d->output(k); out.defined()) adopt_result(out, s.at(k).toTensor());
    }
  }
}

void Executor::materialize_all() {
  if (deferred_.empty()) return;
  std::vector<Deferred*> all;
  for (Deferred& d : deferred_) all.push_back(&d);
  std::sort(all.begin(), all.end(),
            [](const Deferred* a, const Deferred* b) { return a->index < b->index; });
  materialize(all);
  for (Deferred* d : all) {
    if (armed_) ++armed_->groups[static_cast<std::size_t>(d->group)].eager_runs;
  }
  deferred_.clear();
}

void Executor::complete_iteration() {
  materialize_all();  // empty unless a group's kernel could not run
  if (mode_ == Mode::kCapture) {
    Replay& r = *armed_->replay;
    r.end_capture();
    if (!r.failed()) {
      const Replay::CaptureCost& c = r.capture_cost();
      log_debug(concat("hotpath: signature ", armed_->hex, ": captured ", r.graphs(),
                       " graph(s) in ", ms_text(r.capture_ms()), " of host time: stream captures ",
                       ms_text(c.streams_ms), ", instantiating ", ms_text(c.instantiate_ms),
                       ", shadow ops and kernel nodes ", ms_text(c.shadows_ms),
                       ", read-only inputs' checks ", ms_text(c.checks_ms), " (their wait ",
                       ms_text(c.wait_ms), "), growing the pool first ", ms_text(c.pool_ms), " (",
                       c.mallocs, " new allocator segment(s), pool ", r.pool_bytes() >> 20,
                       " MiB; ", r.static_nodes(), " moving input(s) copied in by their graphs)"));
    }
  }
  if (mode_ == Mode::kReplay) {
    armed_->replay->end_replay();
    // Its ops that took the fast lane left the recorder no record to hash: it has the plan's.
    recorder_.note_replayed(iter_start_, static_cast<std::int64_t>(armed_->ops.size()),
                            armed_->signature, /*left=*/false);
  }
  ++armed_->fused_iterations;
  ++armed_->steady;
  completed_[completed_next_++ % std::size(completed_)] =
      Completed{armed_->signature,
                iter_start_,
                armed_->epoch,
                launched_ || !waited_,
                tiers_final_,
                /*diverged=*/false,
                0,
                stood_in_,
                waited_,
                /*replayed=*/mode_ == Mode::kReplay,
                /*captured=*/mode_ == Mode::kCapture && !armed_->replay->failed()};
  launched_ = false;
  waited_ = false;
  stood_in_ = false;
  tiers_final_ = true;
  // The governor's requests take effect between iterations; the next iteration is armed where
  // the recorder expects it to start (after a training step's tail, which runs eagerly).
  disarm();
  tail_.store(recorder_.cuts_tails(), std::memory_order_relaxed);
}

void Executor::on_boundary() {
  std::lock_guard<std::mutex> lock(mu_);
  if (armed_ && cursor_ != 0) {
    diverge(concat("the iteration ended after ", cursor_, " of ", armed_->ops.size(), " ops"));
  }
  restore_unwritten(true);  // the loop body's temporaries are gone: what is alive is kept
  disarm();  // re-armed at the next op, where the recorder expects an iteration to start
}

void Executor::flush(bool keep_plan) {
  std::lock_guard<std::mutex> lock(mu_);
  if (armed_ && mode_ == Mode::kReplay && cursor_ != 0) {
    diverge("a pause in a replayed iteration");  // the graphs cannot run part of it
    return;
  }
  if (armed_ && mode_ == Mode::kCapture) leave_replay("a pause in the captured iteration");
  materialize_all();
  restore_unwritten(true);
  if (!keep_plan) disarm();
}

void Executor::run_eager(const std::vector<const Deferred*>& members,
                         std::map<const c10::TensorImpl*, at::Tensor>& remap) {
  c10::impl::ExcludeDispatchKeyGuard no_hook(kHookKey);
  at::AutoDispatchBelowADInplaceOrView below;
  auto mapped = [&](const at::Tensor& t) {
    const auto it = remap.find(t.unsafeGetTensorImpl());
    return it != remap.end() ? it->second : t;
  };
  for (const Deferred* d : members) {
    torch::jit::Stack s;
    for (const auto& a : d->args) {
      if (a.isTensor()) {
        s.emplace_back(mapped(a.toTensor()));
      } else if (a.isTensorList()) {  // a stack's inputs
        c10::List<at::Tensor> list;
        for (const at::Tensor& t : a.toTensorList().vec()) list.push_back(mapped(t));
        s.emplace_back(std::move(list));
      } else {
        s.push_back(a);
      }
    }
    d->op.redispatchBoxed(d->keys, &s);
    if (d->out_alias >= 0) continue;
    for (std::size_t k = 0; k < d->made.size(); ++k) {
      if (const at::Tensor out = d->output(k); out.defined())
        remap[out.unsafeGetTensorImpl()] = s.at(k).toTensor();
    }
  }
}

void Executor::disarm() {
  if (!armed_) return;
  const std::shared_ptr<Plan> plan = std::move(armed_);  // leaves armed_ empty
  set_mode(Mode::kPlan);
  if (plan->reverted && plan->replay) drop_replay(*plan, "");
  uncount_if_reverted(*plan);
}

}  // namespace hotpath::detail
