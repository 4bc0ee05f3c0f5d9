// Finds a training loop's steps from what autograd makes every step look like, not from op
// strings: each forward pass reads tensors that require grad with grad mode on, and follows a
// backward pass and an optimizer step that run with grad mode off (the autograd engine runs
// backward ops with grad mode off; optimizers and gradient clipping run under NoGradGuard).
//
// An anchor is an op with grad mode on that reads a leaf requiring grad (a parameter), after an
// op with grad mode off (or the first such op after enabling): the start of a forward pass. The
// loss's item() or detach() after the step read no leaf and do not anchor. Anchors cut the
// op stream into segments; a segment's token hashes the names of its first ops and the number of
// its ops with grad mode off (a GAN's discriminator pass for the generator reads the same first
// ops as its pass on real images, but its backward goes through the generator too). A step is P
// segments (one per backward() in a step: a GAN's three), found as the smallest P for which the
// last 2P tokens repeat; iterations start at the first segment of that periodic run, and then at
// every P-th anchor. Data preparation, host syncs and logging (grad mode on, nothing requiring
// grad) and evaluation under NoGradGuard never anchor, so they stay inside the step they follow
// and cannot shift the boundary; the stack of a model's identical layers and an optimizer's
// per-parameter chains are inside a segment and cannot be taken for the step.
// A step ends with the optimizer's update of the parameters (ops that write a parameter in place):
// once a loop has shown one, a step must contain one. Gradient accumulation's micro-batches (a
// forward and backward each, the update after the last) are then one step, not one each. Until
// an update is seen, kMaxSegments + 1 segments pass before a step without one is taken (a loop
// that never updates: forward and backward alone).
// Locked, a segment whose token is not the one expected at its place in the step, twice in a
// row, means the loop changed (another phase of training): the search starts again from there.
// A step found again (after that, or by a detector that took over after hotpath looked away for
// a while, e.g. standing aside) keeps the phase it had: a search that resumes mid-step would
// otherwise cut a GAN's three passes in another order, and the same step would get another
// signature. The detector remembers the steps it locked onto and carries them over (known()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace hotpath::detail {

class StepDetector {
 public:
  // Segments a step may have, at most; tokens hash this many first op names of a segment.
  static constexpr int kMaxSegments = 8;
  static constexpr int kTokenOps = 8;
  // Steps remembered (the most recent ones).
  static constexpr std::size_t kKnownSteps = 8;
  // A step: the token of each of its segments, in the order the loop runs them.
  using Step = std::vector<std::uint64_t>;

  // `known`: steps an earlier detector locked onto; one found again starts where it did.
  explicit StepDetector(std::vector<Step> known = {}) : known_(std::move(known)) {}

  // Feeds the op at global position `pos` (consecutive) before it runs: its operator name hash,
  // whether grad mode is on, whether it reads a parameter and whether it writes one. Appends to
  // `boundaries` every position at which an iteration now known to be complete ends (= where the
  // next starts), ascending; a boundary equal to `pos` means an iteration starts with this op.
  // Returns whether the op is an anchor.
  bool feed(std::int64_t pos, std::uint64_t name, bool grad_enabled, bool reads_param,
            bool writes_param, std::vector<std::int64_t>& boundaries);

  bool locked() const { return locked_; }
  // Ops were not seen from an iteration's first op (a plain-eager block ended there): the
  // segment under way is the step's first, its token unknown (not compared).
  void resync() {
    slot_ = 0;
    open_ = false;
    grad_off_since_anchor_ = false;
  }
  // Segments per step once locked (0 before).
  int period() const { return locked_ ? period_ : 0; }
  // Anchors seen: 0 for loops that never train (inference): another detector must find them.
  std::int64_t anchors() const { return anchors_; }
  // The earliest position an unreported iteration can start at: ops before it belong to none.
  std::int64_t history_start() const { return history_start_; }
  // Times a locked step was abandoned (the loop changed).
  std::int64_t losses() const { return losses_; }
  // The steps locked onto so far (and those this detector was given).
  const std::vector<Step>& known() const { return known_; }

 private:
  void close_segment();
  void try_lock(std::vector<std::int64_t>& boundaries);
  void restart(std::int64_t at);
  // How many segments past `s` the known rotation of the step of `period` segments starting at
  // tokens_[s] begins (0 if the step is new).
  int known_shift(std::int64_t s, int period) const;
  void remember();

  bool grad_off_since_anchor_ = false;
  std::int64_t anchors_ = 0;
  std::int64_t history_start_ = 0;
  bool any_op_ = false;
  // The search: segment starts and tokens since the last restart; the open segment's token.
  std::vector<std::int64_t> starts_;
  std::vector<std::uint64_t> tokens_;
  std::vector<bool> updates_;  // per segment of the search: it wrote a parameter
  std::uint64_t open_token_ = 0;
  bool open_update_ = false;
  int open_ops_ = 0;
  std::int64_t open_off_ = 0;  // ops with grad mode off (its backward and optimizer)
  bool open_ = false;
  // Locked.
  bool locked_ = false;
  int period_ = 0;
  std::vector<std::uint64_t> step_tokens_;  // the expected token of each segment of a step
  int slot_ = 0;                            // the open segment's place in the step
  int mismatches_ = 0;                      // consecutive segments with an unexpected token
  std::int64_t losses_ = 0;
  std::vector<Step> known_;
};

}  // namespace hotpath::detail
