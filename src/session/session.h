// What one thread that enabled hotpath owns: its recorder, the executor of its plans, and the
// governor that times them. The session is where they meet: the hook hands it each op (OpSink),
// it passes the op to the recorder, the governor and the executor in turn, and it applies the
// governor's choices to the executor's plans (PlanControl). Nothing below it calls up.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "dispatch/op_call.h"
#include "exec/executor.h"
#include "policy/governor.h"
#include "policy/plan_control.h"
#include "policy/stand_aside.h"
#include "trace/recorder.h"

namespace hotpath::detail {

struct Session final : OpSink, PlanControl {
  explicit Session(const Config& config)
      : recorder(config),
        executor(recorder, config),
        governor(*this, config),
        aside_policy(config.threshold),
        aside_enabled(config.stand_aside) {
    profile_host(config.host_profile);
    recorder.set_hot_listener([this](HotTrace&& t) {
      const std::uint64_t sig = t.signature;
      const std::optional<Decision> d = governor.remembered(sig);
      executor.on_hot(std::move(t), d ? std::optional<PlanPrior>(*d) : std::nullopt);
    });
    recorder.set_ahead_listener([this](HotTrace&& t) {
      const std::optional<Decision> d = governor.remembered(t.signature);
      if (d && !d->compile) return;  // a known loser: nothing of it is compiled
      executor.compile_ahead(std::move(t));
    });
    recorder.set_iteration_listener([this](const IterationEvent& e) {
      governor.on_iteration(e);
      judge_iteration(e);
    });
    recorder.set_instant_hot([this](std::uint64_t sig) {
      const auto d = governor.remembered(sig);
      return d.has_value() && d->compile;
    });
    governor.set_plain_blocks([this] { return recorder.plain_blocks_possible(); });
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  void configure(const Config& config) {
    recorder.configure(config);
    executor.configure(config);
    governor.configure(config);
    profile_host(config.host_profile);
    std::lock_guard<std::mutex> lock(aside_mu);
    aside_policy.configure(config.threshold);
    aside_enabled = config.stand_aside;
  }
  // Config::prepare_known: the newest known winners' plans built before their signatures are
  // seen (Executor::prepare_known), after enabling or configuring again.
  void prepare_known() { executor.prepare_known(governor.known_winners(Executor::kPrepareAtMost)); }
  // An iteration boundary (step(), Iteration scope) before the next op.
  void boundary();

  // Each op of the owner thread and of autograd threads working for it (OpSink).
  void on_op(OpCall& call) override;
  // The fast lane (OpSink): ops of a replayed iteration, and ops of a step's tail after a plan's
  // iteration (Executor::in_tail), with no record built.
  bool fast_lane_open() const override { return executor.replaying() || executor.in_tail(); }
  bool fast_lane_guards() const override { return executor.replaying(); }
  bool fast_op(const c10::OperatorHandle& op, c10::DispatchKeySet below, torch::jit::Stack* stack,
               const FastInputs& in, bool owner) override;
  // An op of a step's tail on the fast lane: one of the owner's, with grad mode on, that reads
  // and writes no parameter (an op that does goes the full way, and closes the tail: the next
  // forward pass, or the optimizer's or an evaluation's work that the core then takes in). It
  // runs below the hook and leaves a light record for the step detector.
  bool tail_op(const c10::OperatorHandle& op, c10::DispatchKeySet below, torch::jit::Stack* stack,
               const FastInputs& in, bool owner);
  // A fast-lane op's light record (Recorder::commit_fast): `key` as a record of it would have it.
  void commit_light(const c10::OperatorHandle& op, const FastInputs& in, std::uint64_t key,
                    bool tail);

  // What the governor sees of the plans and asks of them (PlanControl).
  Run ran(std::uint64_t signature, std::int64_t first) const override;
  std::optional<std::vector<Group>> groups(std::uint64_t signature) const override;
  Pool replay_pool(std::uint64_t signature) const override;
  std::int64_t set_active(std::uint64_t signature, const std::vector<bool>& active,
                          const std::string& reason) override;
  void revert(std::uint64_t signature, const std::string& reason) override;
  void no_stand_in(std::uint64_t signature, const std::string& reason) override;
  void keep_stand_in(std::uint64_t signature, const std::string& reason) override;
  void no_replay(std::uint64_t signature, const std::string& reason) override;
  void release_replay(std::uint64_t signature, const std::string& reason) override;

  // Standing aside (policy/stand_aside.h). The decision may come from any thread that closes an
  // iteration; the owner thread's hook acts on it at its next op.
  void judge_iteration(const IterationEvent& e);
  void judge_ops();  // every kJudgeOps ops
  static constexpr std::int64_t kJudgeOps = 4096;
  bool aside_due() const { return aside_due_.load(std::memory_order_relaxed); }
  void stand_aside();      // on the owner thread
  void back_from_aside();  // on the owner thread, before its first op is recorded again
  void fill_stats(Stats& s) const;

  // Plain-eager blocks (Governor::set_plain_blocks): started at an op that starts an iteration
  // in a training loop (true: the hook is out of the dispatch from this op on), or by a step()
  // boundary in a marked loop; back_from_plain_block runs before the first op seen again.
  bool start_plain_block(std::int64_t index);
  void back_from_plain_block();
  // After a block the iteration marker ended: whether the ops seen since are the iteration's
  // (the owner's first forward ops of the plan), for the governor's plain_block_checked.
  void check_after_block(const OpRecord& rec);
  // The check's end: `unsure` says why the block's end is no proven iteration start (empty:
  // proven). Unproven ends drop the block; kUnconfirmedEnds of them in a row fail the marker.
  void block_checked(const Plan& plan, const std::string& unsure);
  void marker_failed(const Plan& plan, const std::string& what);  // drops the block
  // A Pause began: a block running is dropped (its time would include the pause's) and the
  // governor asks for another.
  void cancel_plain_block();

  Recorder recorder;
  Executor executor;
  Governor governor;

 private:
  void due(std::string why);
  mutable std::mutex aside_mu;
  StandAside aside_policy;
  bool aside_enabled = true;
  std::set<std::uint64_t> hot_seen;
  std::string aside_reason;
  std::int64_t aside_times = 0;
  double aside_seconds = 0;
  std::atomic<bool> aside_due_{false};
  std::atomic<bool> aside_now_{false};
  // A plain-eager block in a loop marked with step(): iterations left to count (0: none).
  int plain_steps_left_ = 0;
  // The iteration marker's calls per iteration, learned per signature (0: not yet, -1: its
  // count proved wrong; owner thread), and the check of a block it ended.
  std::map<std::uint64_t, std::int64_t> marks_per_iteration_;
  std::map<std::uint64_t, int> unconfirmed_ends_;  // the marker's blocks' in a row, per signature
  static constexpr int kUnconfirmedEnds = 2;
  struct BlockCheck {
    std::shared_ptr<const Plan> plan;
    std::size_t next = 0;  // the plan op the next owner op must be
    std::string unsure;    // why the end is no proven iteration start so far (empty: proven)
  } check_;
  static constexpr std::size_t kCheckOps = 32;
};

// The calling thread's session (kept after disable), or nullptr. For tests and tools.
std::shared_ptr<Session> thread_session();

}  // namespace hotpath::detail
