#include "exec/session.h"

#include "common/error.h"
#include "common/log.h"
#include "dispatch/dispatch_hook.h"

namespace hotpath::detail {

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
    if (--plain_steps_left_ == 0) {
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
  if (!plan || plan->pass_starts.empty()) return false;
  const int n = governor.take_plain_block(sig);
  if (n == 0) return false;
  executor.flush();
  governor.plain_block_begin(index);
  if (!::hotpath::detail::start_plain_block(plan->pass_starts, n,
                                            [this] { governor.plain_block_end(); })) {
    governor.plain_block_cancel();
    return false;
  }
  return true;
}

void Session::back_from_plain_block() { recorder.resume_after_block(); }

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
}

}  // namespace hotpath::detail
