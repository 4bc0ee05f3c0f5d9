#include "session/session.h"

#include "common/error.h"
#include "common/hash.h"
#include "common/log.h"
#include "dispatch/dispatch_hook.h"

namespace hotpath::detail {

void Session::on_op(OpCall& call) {
  executor.close_tail();  // an op the fast lane did not take: what follows is no step's tail
  if (call.owner) {
    if (call.back_from_plain) back_from_plain_block();
    if (call.back_from_aside) back_from_aside();
    // Ops under a Pause are no iteration's: the check goes on after one.
    if (check_.plan) check_after_block(call.record());
    if (aside_due() && !standing_aside() && !in_backward_pass()) {
      stand_aside();  // the hook is out of the dispatch from the next op on
      call.run_eager();
      return;
    }
  }
  OpRecord& rec = call.record();
  host_lap(kOtherPart);
  recorder.resolve_inputs(rec, call.inputs());
  host_lap(kFlowPart);

  // The governor times iterations between boundaries; in an auto-detected loop the boundary is
  // the op where the detector expects the next iteration to start.
  if (!governor.cuda_noted()) {
    for (const TensorInput& in : rec.inputs) {
      if (in.meta.defined && in.meta.device.is_cuda()) {
        governor.note_cuda(in.meta.device.index());
        break;
      }
    }
  }
  const std::int64_t index = recorder.next_index();
  if (index == recorder.boundary_due()) governor.stamp(index);
  if (index % kJudgeOps == 0 && call.owner) judge_ops();
  // The governor wants the loop timed without hotpath: from this iteration start on, the hook is
  // out of the dispatch for a block of iterations (this op is the block's first).
  if (call.owner && governor.plain_block_wanted() && index == recorder.expected_start() &&
      start_plain_block(index)) {
    call.run_eager();
    return;
  }

  // A hot plan may run the op itself (deferred into a fused group); otherwise it runs eagerly.
  const bool planned = executor.intercept(call.op, call.below, call.stack, rec, call.inputs());
  host_lap(kDeferPart);  // what the executor did after its last lap
  if (!planned) call.run_eager();
  const TensorPtrs& outputs = call.finish();
  executor.returned(outputs);
  recorder.commit(call.owned_record(), outputs);
  host_lap(kCommitPart);
}

bool Session::fast_op(const c10::OperatorHandle& op, c10::DispatchKeySet below,
                      torch::jit::Stack* stack, const FastInputs& in, bool owner) {
  // What on_op would do first for the owner goes through on_op: a check after a plain block,
  // standing aside and the governor's boundary stamp (the periodic judgement is taken below).
  if (owner && (check_.plan || aside_due())) return false;
  const std::int64_t index = recorder.next_index();
  if (index == recorder.boundary_due()) return false;
  // The stand-aside policy's periodic look, as on_op takes it: what it finds due is acted on
  // from the next op (the check above). The op itself stays on the lane: sent the full way it
  // closed a step's tail, and the rest of that tail paid the full record (a quarter of a
  // 2000-op tail's ops, where every other step met the look).
  if (owner && index % kJudgeOps == 0) judge_ops();
  if (!executor.replaying()) return tail_op(op, below, stack, in, owner);
  if (!in.hashed) return false;  // walked for a tail that ended before the op came here
  std::uint64_t key = 0;
  const Executor::Fast how = executor.fast_replay(op, below, stack, in, key);
  if (how == Executor::Fast::kDeclined) return false;
  host_lap(kDeferPart);
  if (how != Executor::Fast::kHandled) {
    host_lap(kOtherPart);
    op.redispatchBoxed(below, stack);
    host_lap(kBelowPart);
    // A handed-out output has the plan's metadata (the executor noted it). An op run below the
    // hook returns its outputs to the replay's table of values: a view's (kView) have the plan's
    // metadata; any other's are hashed as they came onto the plan's input key (`key`).
    TensorPtrs outputs;
    const bool view = how == Executor::Fast::kView;
    const std::uint64_t k = fast_outputs(key, op, *stack, outputs, !view);
    if (!view) key = k;
    executor.returned(outputs, view);
  }
  commit_light(op, in, key, false);
  return true;
}

bool Session::tail_op(const c10::OperatorHandle& op, c10::DispatchKeySet below,
                      torch::jit::Stack* stack, const FastInputs& in, bool owner) {
  if (!owner || !in.grad_enabled || in.reads_param || in.writes_param) return false;
  if (!executor.tail_op(stack, op.schema().arguments().size())) return false;
  host_lap(kOtherPart);
  op.redispatchBoxed(below, stack);
  host_lap(kBelowPart);
  commit_light(op, in, in.name_key, true);
  return true;
}

void Session::commit_light(const c10::OperatorHandle& op, const FastInputs& in, std::uint64_t key,
                           bool tail) {
  Recorder::FastOp f;
  f.name = op.schema().name();
  f.overload = op.schema().overload_name();
  f.key = key;
  f.name_key = in.name_key;
  f.grad_enabled = in.grad_enabled;
  f.reads_param = in.reads_param;
  f.writes_param = in.writes_param;
  f.tail = tail;
  recorder.commit_fast(f);
  host_lap(kCommitPart);
}

PlanControl::Run Session::ran(std::uint64_t signature, std::int64_t first) const {
  const Executor::RunInfo r = executor.ran(signature, first);
  Run run;
  run.fused = r.fused;
  run.epoch = r.epoch;
  run.final_tiers = r.final_tiers;
  run.left_plan = r.left_plan;
  run.plan_ops = r.plan_ops;
  run.stand_in = r.stand_in;
  run.waited = r.waited;
  run.replayed = r.replayed;
  run.captured = r.captured;
  return run;
}

std::optional<std::vector<PlanControl::Group>> Session::groups(std::uint64_t signature) const {
  const auto plan = executor.plan(signature);
  if (!plan) return std::nullopt;
  std::vector<Group> out;
  out.reserve(plan->groups.size());
  for (const PlanGroup& g : plan->groups) out.push_back(Group{g.name, g.active_default});
  return out;
}

PlanControl::Pool Session::replay_pool(std::uint64_t signature) const {
  const auto [bytes, small] = executor.replay_pool(signature);
  return Pool{bytes, small};
}

std::int64_t Session::set_active(std::uint64_t signature, const std::vector<bool>& active,
                                 const std::string& reason) {
  return executor.set_active(signature, active, reason);
}

void Session::revert(std::uint64_t signature, const std::string& reason) {
  executor.revert(signature, reason);
  // With no plan left that may run, the hook only costs the loop: it stands aside from the next
  // op (and looks again later) instead of at the end of the stand-aside window.
  std::set<std::uint64_t> hot;
  {
    std::lock_guard<std::mutex> lock(aside_mu);
    hot = hot_seen;
  }
  hot.insert(signature);
  for (std::uint64_t s : hot)
    if (executor.plan_live(s)) return;
  due(concat("its last plan that could run was reverted (signature ", short_hex(signature), ")"));
}

void Session::no_stand_in(std::uint64_t signature, const std::string& reason) {
  executor.no_stand_in(signature, reason);
}

void Session::keep_stand_in(std::uint64_t signature, const std::string& reason) {
  executor.keep_stand_in(signature, reason);
}

void Session::no_replay(std::uint64_t signature, const std::string& reason) {
  executor.no_replay(signature, reason);
}

void Session::release_replay(std::uint64_t signature, const std::string& reason) {
  executor.release_replay(signature, reason);
}

void Session::due(std::string why) {
  std::lock_guard<std::mutex> lock(aside_mu);
  if (!aside_enabled) return;
  aside_reason = std::move(why);
  aside_due_.store(true, std::memory_order_relaxed);
}

void Session::judge_iteration(const IterationEvent& e) {
  std::optional<std::string> why;
  const bool live = executor.plan_live(e.signature);
  {
    std::lock_guard<std::mutex> lock(aside_mu);
    if (e.hot) hot_seen.insert(e.signature);
    why = aside_policy.after_iteration(live, static_cast<std::int64_t>(hot_seen.size()));
  }
  if (why) due(std::move(*why));
}

void Session::judge_ops() {
  const Recorder::Progress p = recorder.progress();
  std::optional<std::string> why;
  {
    std::lock_guard<std::mutex> lock(aside_mu);
    why = aside_policy.after_ops(p.training, p.anchors, p.iterations, p.ops_without_iteration);
  }
  if (why) due(std::move(*why));
}

void Session::stand_aside() {
  executor.flush();  // nothing deferred may stay unwritten
  governor.note_pause(recorder.next_index());
  recorder.gap();
  double seconds = 0;
  std::string why;
  {
    std::lock_guard<std::mutex> lock(aside_mu);
    seconds = aside_policy.pause_seconds();
    why = aside_reason;
    ++aside_times;
    aside_seconds += seconds;
  }
  aside_due_.store(false, std::memory_order_relaxed);
  aside_now_.store(true, std::memory_order_relaxed);
  log_info(concat("hotpath: standing aside for ", seconds,
                  " s (the loop runs plain eager, "
                  "nothing intercepted): ",
                  why));
  stand_aside_current_thread(seconds);
}

void Session::back_from_aside() {
  aside_now_.store(false, std::memory_order_relaxed);
  recorder.gap();
  {
    std::lock_guard<std::mutex> lock(aside_mu);
    aside_policy.look_again();
  }
  log_debug("hotpath: looking at the loop again");
}

void Session::boundary() {
  if (plain_steps_left_ > 0) {  // a plain block in a marked loop: step() counts it
    if (--plain_steps_left_ > 0) governor.plain_block_tick();
    if (plain_steps_left_ == 0) {
      governor.plain_block_end();
      hook_current_thread(true);               // at a step() boundary: the next iteration is whole
      governor.resume(recorder.next_index());  // ... and starts now, not where the block did
    }
    return;
  }
  executor.on_boundary();
  const std::int64_t index = recorder.next_index();
  governor.stamp(index);
  if (governor.plain_block_wanted() && recorder.marked()) {
    const int n = governor.take_plain_block(recorder.position().predicted_signature);
    if (n > 0) {
      executor.flush();
      governor.plain_block_begin(index);
      plain_steps_left_ = n;
      hook_current_thread(false);
    }
  }
}

bool Session::start_plain_block(std::int64_t index) {
  if (recorder.marked()) return false;  // step() counts the block (boundary)
  const std::uint64_t sig = recorder.position().predicted_signature;
  const auto plan = executor.plan(sig);
  if (!plan || plan->pass_starts.empty() || plan->ops.empty()) return false;
  // The iteration marker counts the block where it can: on the iteration's first operator, which
  // starts its first forward pass. Marked only now, this call of it went unseen: the block
  // starts with the next iteration.
  std::int64_t& per = marks_per_iteration_[sig];
  const PlanOp& first = plan->ops.front();
  bool by_marks = false;
  if (per >= 0 && first.op_name == plan->pass_starts.front()) {
    const Marker m = mark_operator(std::string(first.op_name), std::string(first.op_overload));
    if (m == Marker::Fresh) return false;
    by_marks = m == Marker::Counting;
  }
  const int n = governor.take_plain_block(sig);
  if (n == 0) return false;
  executor.flush();
  governor.plain_block_begin(index, by_marks && per > 0);
  PlainBlockSpec spec;
  spec.pass_starts = plan->pass_starts;
  spec.iterations = n;
  spec.by_marks = by_marks;
  spec.marks_per_iteration = by_marks ? per : 0;
  spec.on_tick = [this] { governor.plain_block_tick(); };
  spec.on_end = [this, plan](PlainEnd how) {
    governor.plain_block_end(how != PlainEnd::Counted);
    if (how == PlainEnd::Counted) return;
    // The check reads the owner's next forward ops; a plan with none after its first has
    // nothing to compare. A marked call with grad mode off (an evaluation's forward pass under
    // no_grad, or a count that reached into a backward pass) ended the block at the next one in
    // a forward pass: the check says which, and the block's last iteration held that stretch.
    std::string unsure =
        how == PlainEnd::Miscounted ? "a marked call with grad mode off ran inside it" : "";
    if (plan->ops.size() > 1 && plan->ops[1].grad_enabled)
      check_ = BlockCheck{plan, 1, std::move(unsure)};
    else
      block_checked(*plan, unsure);
  };
  spec.on_marks = [this, sig](std::int64_t count, int left) {
    marks_per_iteration_[sig] = count;
    governor.plain_block_restart(left);
  };
  if (!::hotpath::detail::start_plain_block(std::move(spec))) {
    governor.plain_block_cancel();
    return false;
  }
  return true;
}

void Session::back_from_plain_block() { recorder.resume_after_block(); }

void Session::check_after_block(const OpRecord& rec) {
  const Plan& plan = *check_.plan;
  const PlanOp& want = plan.ops[check_.next];
  if (rec.input_key != want.input_key) {
    // Another operator: the block ended away from an iteration start. The plan's operators on
    // other inputs: an iteration of other shapes (a loader's last, short batch), or the marker's
    // count landed on a layer like the first; the rest of the check and the next block tell.
    if (rec.name != want.op_name || rec.overload != want.op_overload) {
      marker_failed(plan, concat(full_name(rec.name, rec.overload), " where the plan has ",
                                 full_name(want.op_name, want.op_overload)));
      return;
    }
    if (check_.unsure.empty())
      check_.unsure = concat("the iteration after it had other inputs, from ",
                             full_name(rec.name, rec.overload), " on");
  }
  ++check_.next;
  if (check_.next == plan.ops.size() || check_.next > kCheckOps ||
      !plan.ops[check_.next].grad_enabled) {
    const BlockCheck done = std::move(check_);
    check_ = BlockCheck{};
    block_checked(*done.plan, done.unsure);
  }
}

void Session::block_checked(const Plan& plan, const std::string& unsure) {
  int& in_a_row = unconfirmed_ends_[plan.signature];
  if (unsure.empty()) {
    in_a_row = 0;
    governor.plain_block_checked(PlainCheck::Confirmed);
    return;
  }
  // A count that is wrong ends every block so: twice in a row is no coincidence of the loop.
  if (++in_a_row >= kUnconfirmedEnds) {
    marker_failed(plan, concat(unsure, "; the block before ended unconfirmed too"));
    return;
  }
  log_info(concat("hotpath: signature ", plan.hex,
                  ": a plain-eager block counted by the iteration marker ended where it could "
                  "not be confirmed as an iteration start (",
                  unsure, "); its times are dropped and the marker counts the next block"));
  governor.plain_block_checked(PlainCheck::Unconfirmed);
}

void Session::marker_failed(const Plan& plan, const std::string& what) {
  log_info(concat("hotpath: signature ", plan.hex,
                  ": a plain-eager block counted by the iteration marker ended away from an "
                  "iteration start (",
                  what, "); its times are dropped and its blocks count with RecordFunction"));
  marks_per_iteration_[plan.signature] = -1;
  check_ = BlockCheck{};
  governor.plain_block_checked(PlainCheck::Miscounted);
}

void Session::cancel_plain_block() {
  if (plain_steps_left_ > 0) {  // a marked loop's: the iteration under way was partly unseen
    plain_steps_left_ = 0;
    hook_current_thread(true);
    recorder.gap();
    governor.plain_block_cancel();
  } else if (::hotpath::detail::cancel_plain_block()) {
    recorder.resume_after_block();
    governor.plain_block_cancel();
  }
}

void Session::fill_stats(Stats& s) const {
  std::lock_guard<std::mutex> lock(aside_mu);
  s.stood_aside = aside_times;
  s.aside_seconds = aside_seconds;
  s.aside_reason = aside_times > 0 ? aside_reason : std::string();
  s.standing_aside = aside_now_.load(std::memory_order_relaxed);
  const HostCounters h = host_counters();
  auto us = [&](HostPart p) { return h.ns[p] / 1e3; };
  s.host_ops = h.ops;
  s.host_record_us = us(kRecordPart);
  s.host_flow_us = us(kFlowPart);
  s.host_guard_us = us(kGuardPart);
  s.host_defer_us = us(kDeferPart);
  s.host_launch_us = us(kLaunchPart);
  s.host_copy_us = us(kCopyPart);
  s.host_graph_us = us(kGraphPart);
  s.host_commit_us = us(kCommitPart);
  s.host_hook_us = s.host_record_us + s.host_flow_us + s.host_guard_us + s.host_defer_us +
                   s.host_launch_us + s.host_copy_us + s.host_graph_us + s.host_commit_us +
                   us(kOtherPart);
  s.host_below_us = us(kBelowPart);
}

}  // namespace hotpath::detail
