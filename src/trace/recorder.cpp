#include "trace/recorder.h"

#include <chrono>

#include <c10/core/TensorImpl.h>

#include "common/error.h"
#include "common/hash.h"
#include "common/log.h"
#include "trace/signature.h"

namespace hotpath::detail {

Recorder::Recorder(const Config& config) { configure(config); }

void Recorder::set_hot_listener(HotListener listener) {
  std::lock_guard<std::mutex> lock(mu_);
  hot_listener_ = std::move(listener);
}

void Recorder::set_iteration_listener(IterationListener listener) {
  std::lock_guard<std::mutex> lock(mu_);
  iteration_listener_ = std::move(listener);
}

void Recorder::set_instant_hot(InstantHot predicate) {
  std::lock_guard<std::mutex> lock(mu_);
  instant_hot_ = std::move(predicate);
}

void Recorder::set_ahead_listener(HotListener listener) {
  std::lock_guard<std::mutex> lock(mu_);
  ahead_listener_ = std::move(listener);
}

void Recorder::notify_hot() {
  std::vector<HotTrace> traces;
  std::vector<IterationEvent> closed;
  HotListener listener, ahead_listener;
  IterationListener iteration_listener;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (hot_traces_.empty() && closed_.empty()) return;
    traces.swap(hot_traces_);
    closed.swap(closed_);
    listener = hot_listener_;
    ahead_listener = ahead_listener_;
    iteration_listener = iteration_listener_;
  }
  // Hot first: a plan built now can be in place for the iteration events that follow.
  // At debug level: what handing them over costs the loop's thread.
  const bool timed = log_enabled(LogLevel::Debug);
  for (auto& t : traces) {
    const HotListener& to = t.ahead ? ahead_listener : listener;
    if (to) {
      const std::uint64_t signature = t.signature;
      const auto t0 = std::chrono::steady_clock::now();
      to(std::move(t));
      if (timed)
        log_debug(concat("hotpath: signature ", short_hex(signature),
                         ": handed to the executor in ", ms_text(ms_since(t0)),
                         " on the loop's thread"));
    }
  }
  if (iteration_listener) {
    for (const auto& e : closed) {
      const auto t0 =
          timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
      iteration_listener(e);
      const double ms = timed ? ms_since(t0) : 0;
      if (ms > 0.05)
        log_debug(concat("hotpath: signature ", short_hex(e.signature), " iteration ", e.count,
                         ": the governor took ", ms_text(ms), " on the loop's thread"));
    }
  }
}

std::int64_t Recorder::expected_start_locked() const {
  if (mode_ == BoundaryMode::Explicit)
    return next_ == seg_start_ && (!uses_scopes_ || scope_depth_ > 0) ? next_ : -1;
  if (mode_ == BoundaryMode::Auto && training_) return start_here_ == next_ ? next_ : -1;
  if (mode_ == BoundaryMode::Auto && detector_ && detector_->locked())
    return detector_->expected_boundary();
  return -1;
}

void Recorder::publish_locked() {
  next_atomic_.store(next_, std::memory_order_relaxed);
  const std::int64_t start = expected_start_locked();
  start_atomic_.store(start, std::memory_order_relaxed);
  due_atomic_.store(mode_ == BoundaryMode::Auto ? start : -1, std::memory_order_relaxed);
}

void Recorder::configure(const Config& config) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool detector_changed = !detector_ || config.max_period_ops != config_.max_period_ops;
  config_ = config;
  if (detector_changed && mode_ != BoundaryMode::Explicit) {
    detector_ = std::make_unique<PeriodDetector>(config_.max_period_ops, next_);
    drop_pending(next_);
  }
  publish_locked();
}

void Recorder::resolve_inputs(OpRecord& rec, c10::ArrayRef<const at::TensorBase*> tensors) {
  std::lock_guard<std::mutex> lock(mu_);
  resolve_locked(rec, tensors);
  if (mode_ != BoundaryMode::Explicit && config_.auto_detect_period) {
    detect_steps(rec.name_key, rec.grad_enabled, rec.reads_param, rec.writes_param);
    publish_locked();
    // Iterations closed here reach the listeners after the op (commit): the governor's stamp of
    // the boundary at this op is taken first.
  }
}

void Recorder::detect_steps(std::uint64_t name_key, bool grad_enabled, bool reads_param,
                            bool writes_param) {
  if (!training_ && grad_enabled && reads_param) {
    // A training loop: its steps are found at its forward passes. Whatever the period detector
    // had pending is dropped (it may have locked onto a part of a step).
    training_ = true;
    detector_.reset();
    steps_ = std::make_unique<StepDetector>();
    drop_pending(next_);
  }
  if (!training_) return;
  mode_ = BoundaryMode::Auto;
  boundaries_.clear();
  if (steps_->feed(next_, name_key, grad_enabled, reads_param, writes_param, boundaries_))
    ++anchors_;
  const std::int64_t history = steps_->history_start();
  for (std::int64_t b : boundaries_) {
    if (history > seg_start_ && history <= b) drop_pending(history);  // a prelude
    close_iteration(b);
  }
  if (history > seg_start_) drop_pending(history);
  start_here_ = !boundaries_.empty() && boundaries_.back() == next_ ? next_ : -1;
  if (steps_->locked()) passes_per_step_ = steps_->period();
}

ValueRef Recorder::ref_of(const at::TensorBase& t) {
  const auto it = values_.find(t.unsafeGetTensorImpl());
  if (it != values_.end()) return it->second.ref;
  const ValueRef ref{-(++outside_ids_), 0};
  track(t, ref);
  return ref;
}

void Recorder::resolve_locked(OpRecord& rec, c10::ArrayRef<const at::TensorBase*> tensors) {
  for (std::size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i]->defined()) rec.inputs[i].ref = ref_of(*tensors[i]);
}

void Recorder::commit_fast(const FastOp& op) {
  bool events = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // What resolve_inputs does before an op, then what commit does after it.
    if (mode_ != BoundaryMode::Explicit && config_.auto_detect_period)
      detect_steps(op.name_key, op.grad_enabled, op.reads_param, op.writes_param);
    const std::int64_t index = next_++;
    OpRecord& r = ops_.push_light();
    r.name = op.name;
    r.overload = op.overload;
    r.key = op.key;
    r.name_key = op.name_key;
    r.grad_enabled = op.grad_enabled;
    r.reads_param = op.reads_param;
    r.writes_param = op.writes_param;
    if (!op.tail) {
      last_light_ = index;
    } else {
      ++ops_tail_lane_;
      if (tail_first_ < seg_start_) tail_first_ = index;
    }
    after_op(index, op.key, op.name_key);
    publish_locked();
    events = !hot_traces_.empty() || !closed_.empty();
  }
  if (events) notify_hot();
}

bool Recorder::cuts_tails() const {
  std::lock_guard<std::mutex> lock(mu_);
  return training_ && mode_ == BoundaryMode::Auto && config_.auto_detect_period;
}

void Recorder::note_replayed(std::int64_t first, std::int64_t ops, std::uint64_t signature,
                             bool left) {
  std::lock_guard<std::mutex> lock(mu_);
  replayed_ = Replayed{first, ops, signature, left};
}

void Recorder::commit(std::unique_ptr<OpRecord>& rec,
                      c10::ArrayRef<const at::TensorBase*> outputs) {
  bool events = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    commit_locked(rec, outputs);
    publish_locked();
    events = !hot_traces_.empty() || !closed_.empty();
  }
  if (events) notify_hot();
}

void Recorder::commit_locked(std::unique_ptr<OpRecord>& rec,
                             c10::ArrayRef<const at::TensorBase*> outputs) {
  const std::int64_t index = next_++;
  register_outputs(index, outputs);
  const std::uint64_t key = rec->key;
  const std::uint64_t name_key = rec->name_key;
  ops_.push_back(rec);
  after_op(index, key, name_key);
}

void Recorder::register_outputs(std::int64_t index, c10::ArrayRef<const at::TensorBase*> outputs) {
  for (std::size_t o = 0; o < outputs.size(); ++o) {
    const at::TensorBase& t = *outputs[o];
    if (!t.defined()) continue;
    const ValueRef ref{index, static_cast<std::int32_t>(o)};
    const auto it = values_.find(t.unsafeGetTensorImpl());
    if (it == values_.end()) {
      track(t, ref);
    } else {
      it->second.ref = ref;
    }
  }
  sweep();
}

void Recorder::after_op(std::int64_t index, std::uint64_t key, std::uint64_t name_key) {
  if (mode_ == BoundaryMode::Explicit) {
    if (uses_scopes_ && scope_depth_ == 0) drop_pending(next_);  // ops between Iteration scopes
    const std::int64_t pending = next_ - seg_start_;
    if (pending > 4 * config_.max_period_ops) {
      if (!warned_unbounded_) {
        log_warn(concat("hotpath: warning: ", pending,
                        " ops since the last step(); dropping them. Call hotpath::step() once per "
                        "iteration or raise Config::max_period_ops."));
        warned_unbounded_ = true;
      }
      drop_pending(next_);
    }
    return;
  }
  if (!config_.auto_detect_period) {
    drop_pending(next_);  // nothing will ever cut these ops into iterations
    return;
  }
  if (training_) return;  // cut by the step detector before each op
  mode_ = BoundaryMode::Auto;
  boundaries_.clear();
  detector_->feed(index, key, name_key, boundaries_);
  if (next_ - looking_since_ < kTrainingGrace) {
    // A training loop's first forward pass may come after many ops of data preparation (a
    // DataLoader's per-sample transforms), whose period is no step: nothing is counted before
    // the loop has shown for this long that it does not train.
    if (!boundaries_.empty()) drop_pending(boundaries_.back());
    return;
  }
  for (std::int64_t b : boundaries_) close_iteration(b);
  if (detector_->history_start() > seg_start_) drop_pending(detector_->history_start());
}

void Recorder::drop_pending(std::int64_t upto) {
  if (upto <= seg_start_) return;
  ops_unassigned_ += upto - seg_start_;
  start_iteration_at(upto);
}

void Recorder::start_iteration_at(std::int64_t first) {
  seg_start_ = first;
  while (base_ < seg_start_ && !ops_.empty()) {
    ops_.pop_front();
    ++base_;
  }
}

void Recorder::close_iteration(std::int64_t end) {
  if (end <= seg_start_) return;
  last_closed_ = end;
  if (after_gap_) {
    after_gap_ = false;
    drop_pending(end);
    return;
  }
  // A training step's core ends with its last op that ran with grad mode off (the optimizer's);
  // what follows (host syncs, logging, the next batch's preparation) is its tail: not in the
  // signature, not in a plan, run eagerly.
  std::int64_t core_end = end;
  if (training_ && mode_ == BoundaryMode::Auto) {
    for (std::int64_t i = end; i-- > seg_start_;) {
      if (!ops_[static_cast<std::size_t>(i - base_)].grad_enabled) {
        core_end = i + 1;
        break;
      }
    }
  }
  if (tail_first_ >= seg_start_ && tail_first_ < core_end) {
    // Ops of a step's tail took the light lane, and then an op with grad mode off drew the core
    // over them: light records are never hashed. Not a plan's iteration either (its ops went on
    // past the plan's): dropped.
    drop_pending(end);
    return;
  }
  if (last_light_ >= seg_start_) {
    close_replayed(end, core_end);
    return;
  }
  const std::uint64_t sig = iteration_signature(ops_, base_, seg_start_, core_end);
  count(sig, seg_start_, core_end, end);
  start_iteration_at(end);
}

void Recorder::close_replayed(std::int64_t end, std::int64_t core_end) {
  // Ops of a replayed iteration took the fast lane: there are no records to hash, and the
  // executor said which plan's iteration it was. One it did not speak of is dropped.
  const Replayed r = replayed_;
  if (r.first != seg_start_ || r.first + r.ops != core_end) {
    drop_pending(end);
    return;
  }
  if (!r.left) {
    count(r.signature, seg_start_, core_end, end);
  } else {
    // It left the plan part-way and finished eagerly: not an iteration of the plan's signature
    // (its ops were not all the plan's), but for the governor a sample of that plan, as any
    // iteration that leaves a plan is (Governor::on_iteration).
    const auto it = index_.find(r.signature);
    const std::int64_t n = it != index_.end() ? signatures_[it->second].count : 0;
    closed_.push_back(IterationEvent{r.signature, seg_start_, end, core_end, n, true, next_});
  }
  start_iteration_at(end);
}

void Recorder::track(const at::TensorBase& t, ValueRef ref) {
  values_.emplace(t.unsafeGetTensorImpl(), Live{WeakTensor(t.getIntrusivePtr()), ref});
  sweep_.push_back(t.unsafeGetTensorImpl());
}

void Recorder::sweep() {
  // Two visits per op, at most one new key per op for most ops: a tensor that died is unmapped
  // (and its TensorImpl freed) after about as many ops as there are live tensors.
  for (int k = 0; k < 2 && sweep_head_ < sweep_.size(); ++k) {
    const c10::TensorImpl* impl = sweep_[sweep_head_++];
    const auto it = values_.find(impl);
    if (it == values_.end()) continue;  // not mapped any more: nothing to visit again
    if (it->second.tensor.expired()) {
      values_.erase(it);
    } else {
      sweep_.push_back(impl);
    }
  }
  if (sweep_head_ > 1024 && 2 * sweep_head_ > sweep_.size()) {
    sweep_.erase(sweep_.begin(), sweep_.begin() + static_cast<std::ptrdiff_t>(sweep_head_));
    sweep_head_ = 0;
  }
}

void Recorder::count(std::uint64_t signature, std::int64_t first, std::int64_t core_end,
                     std::int64_t end) {
  const std::int64_t ops = core_end - first;
  ++iterations_;
  if (last_signature_ != 0) successor_[last_signature_] = signature;
  in_a_row_ = last_signature_ == signature ? in_a_row_ + 1 : 1;
  last_signature_ = signature;
  auto [it, inserted] = index_.try_emplace(signature, signatures_.size());
  bool instant = false;
  if (inserted) {
    instant = instant_hot_ && instant_hot_(signature);
    SignatureStats s;
    s.id = signature;
    s.hex = short_hex(signature);
    s.ops_per_iteration = ops;
    for (std::int64_t i = first; i < core_end; ++i) {
      const OpRecord& op = ops_[static_cast<std::size_t>(i - base_)];
      std::string name(op.name);
      if (!op.overload.empty()) name.append(".").append(op.overload);
      s.op_names.push_back(std::move(name));
    }
    signatures_.push_back(std::move(s));
    log_debug(concat("hotpath: new signature ", short_hex(signature), " (", ops,
                     " ops) at iteration ", iterations_));
  }
  SignatureStats& s = signatures_[it->second];
  ++s.count;
  // (A range with light records has nothing to trace: it turns hot with a recorded one.)
  if (!s.hot && (s.count >= config_.threshold || instant) && last_light_ < first) {
    s.hot = true;
    s.hot_at_iteration = iterations_;
    if (instant) {
      log_info(concat("hotpath: signature ", s.hex, " (", ops,
                      " ops) won in an earlier run; hot at first sight"));
    } else {
      log_info(concat("hotpath: signature ", s.hex, " hot after ", s.count, " iterations (", ops,
                      " ops)"));
    }
    const auto t0 = std::chrono::steady_clock::now();
    hot_traces_.push_back(make_trace(signature, first, core_end));
    log_debug(concat("hotpath: signature ", s.hex, ": trace of ", core_end - first,
                     " ops copied in ", ms_text(ms_since(t0)), " (", values_.size(),
                     " values tracked)"));
  } else if (!s.hot && ahead_listener_ && config_.compile_ahead > 0 &&
             in_a_row_ >= config_.compile_ahead && s.count < config_.threshold &&
             last_light_ < first && ahead_sent_.insert(signature).second) {
    const auto t0 = std::chrono::steady_clock::now();
    hot_traces_.push_back(make_trace(signature, first, core_end));
    hot_traces_.back().ahead = true;
    log_debug(concat("hotpath: signature ", s.hex, " repeated ", in_a_row_,
                     " times in a row: its trace (", ops, " ops) copied in ", ms_text(ms_since(t0)),
                     " for its kernels to compile ahead of hot"));
  }
  closed_.push_back(IterationEvent{signature, first, end, core_end, s.count, s.hot, next_});
}

HotTrace Recorder::make_trace(std::uint64_t signature, std::int64_t first, std::int64_t end) const {
  HotTrace t;
  t.signature = signature;
  t.iteration = iterations_;
  t.ops.reserve(static_cast<std::size_t>(end - first));
  OutsideOrdinals outside;
  // Which outputs are still held by someone now that the iteration is over.
  std::vector<std::vector<bool>> alive(static_cast<std::size_t>(end - first));
  for (std::int64_t i = first; i < end; ++i) {
    alive[static_cast<std::size_t>(i - first)].assign(
        ops_[static_cast<std::size_t>(i - base_)].outputs.size(), false);
  }
  for (const auto& [impl, live] : values_) {
    (void)impl;
    const ValueRef r = live.ref;
    if (r.producer < first || r.producer >= end || live.tensor.expired()) continue;
    auto& flags = alive[static_cast<std::size_t>(r.producer - first)];
    if (static_cast<std::size_t>(r.output) < flags.size())
      flags[static_cast<std::size_t>(r.output)] = true;
  }
  for (std::int64_t i = first; i < end; ++i) {
    OpRecord op = ops_[static_cast<std::size_t>(i - base_)];
    op.output_alive = alive[static_cast<std::size_t>(i - first)];
    for (TensorInput& in : op.inputs) {
      if (!in.meta.defined) continue;
      if (in.ref.producer >= first) {
        in.ref.producer -= first;
      } else {
        const auto it = outside.emplace(in.ref, static_cast<std::int64_t>(outside.size())).first;
        in.ref = ValueRef{-(it->second + 1), 0};
      }
    }
    t.ops.push_back(std::move(op));
  }
  return t;
}

Recorder::Progress Recorder::progress() const {
  std::lock_guard<std::mutex> lock(mu_);
  Progress p;
  p.training = training_ && mode_ == BoundaryMode::Auto;
  p.anchors = anchors_;
  p.iterations = iterations_;
  p.ops_without_iteration = mode_ == BoundaryMode::Explicit ? 0 : next_ - last_closed_;
  return p;
}

void Recorder::gap() {
  std::lock_guard<std::mutex> lock(mu_);
  drop_pending(next_);
  looking_since_ = next_;
  after_gap_ = true;
  last_closed_ = next_;
  if (mode_ == BoundaryMode::Auto) {
    // The detectors start again; a step or period they find again keeps the phase it had.
    if (training_)
      steps_ = std::make_unique<StepDetector>(steps_ ? steps_->known()
                                                     : std::vector<StepDetector::Step>{});
    if (detector_)
      detector_ =
          std::make_unique<PeriodDetector>(config_.max_period_ops, next_, detector_->known());
    after_gap_ = false;  // the detectors start again: nothing incomplete will be closed
  }
  start_here_ = -1;
  publish_locked();
}

void Recorder::resume_after_block() {
  std::lock_guard<std::mutex> lock(mu_);
  drop_pending(next_);
  after_gap_ = true;
  last_closed_ = next_;
  if (steps_) steps_->resync();
  start_here_ = -1;
  publish_locked();
}

bool Recorder::plain_blocks_possible() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mode_ == BoundaryMode::Explicit && !uses_scopes_
             ? true
             : mode_ == BoundaryMode::Auto && training_ && steps_ && steps_->locked();
}

bool Recorder::marked() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mode_ == BoundaryMode::Explicit && !uses_scopes_;
}

StreamPosition Recorder::position() const {
  std::lock_guard<std::mutex> lock(mu_);
  StreamPosition p;
  p.next_op = next_;
  p.iterations = iterations_;
  p.last_signature = last_signature_;
  const auto next = successor_.find(last_signature_);
  p.predicted_signature = next != successor_.end() ? next->second : last_signature_;
  p.expected_start = expected_start_locked();
  return p;
}

void Recorder::use_explicit_boundaries() {
  if (mode_ == BoundaryMode::Explicit) return;
  // Ops the detector had not cut yet are a partial iteration at an arbitrary phase once it had
  // locked; before that they are the loop's first iteration, which this marker now ends.
  if (mode_ == BoundaryMode::Auto &&
      ((detector_ && detector_->locked()) || (steps_ && steps_->locked())))
    drop_pending(next_);
  steps_.reset();
  mode_ = BoundaryMode::Explicit;
  detector_.reset();
}

void Recorder::mark_step() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    use_explicit_boundaries();
    close_iteration(next_);
    publish_locked();
  }
  notify_hot();
}

void Recorder::begin_scope() {
  std::lock_guard<std::mutex> lock(mu_);
  use_explicit_boundaries();
  uses_scopes_ = true;
  if (scope_depth_++ == 0) drop_pending(next_);
  publish_locked();
}

void Recorder::end_scope() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (scope_depth_ == 0) return;
    if (--scope_depth_ == 0) close_iteration(next_);
    publish_locked();
  }
  notify_hot();
}

Stats Recorder::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s;
  s.threshold = config_.threshold;
  s.boundaries = mode_;
  s.detected_period = detector_ ? detector_->period() : 0;
  s.passes_per_step = passes_per_step_;
  s.iterations = iterations_;
  s.ops_seen = next_;
  s.ops_unassigned = ops_unassigned_;
  s.ops_tail_lane = ops_tail_lane_;
  s.signatures = signatures_;
  s.last_signature = last_signature_;
  return s;
}

}  // namespace hotpath::detail
