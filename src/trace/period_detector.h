// Finds the period of a loop from the stream of per-op keys (op + metadata hash, no data flow),
// so that a loop without step()/Iteration markers is still cut into iterations.
//
// Search: every time a key repeats at distance p, a hypothesis "period p" starts; it dies at the
// first op that differs from the op p positions earlier. The smallest p that holds for two whole
// periods (three copies) is accepted. The phase (where an iteration starts) is the rotation of
// the period that matches the start of the history longest: the user enables detection before
// the loop, so the history starts at the loop body's first op. Periods seen before the lock are
// cut retroactively; a first irregular iteration (optimizer state creation, ...) is reported as
// its own segment (the prelude).
// Locked: an iteration starts where the op names of the period's first three ops appear again
// (at least P/2 ops after the last start), so an op inserted now and then (a loss.item() every
// k iterations) or a shape change does not lose the phase; with no anchor for 4P ops a boundary
// is forced. An isolated iteration of another length is tolerated (it has its own signature);
// two in a row mean the period is wrong or gone: it is banned and the search restarts.
// A period found again (after the search restarted, or by a detector that took over after
// hotpath looked away for a while) keeps the phase it had, not the one the resumed history
// suggests: the detector remembers the first keys of each period it locked onto (known()).
// Known limit: a body made of one block repeated three or more times in a row may lock onto
// the block; such loops should mark iterations with step().
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace hotpath::detail {

class PeriodDetector {
 public:
  // A period locked onto before: its length and the keys an iteration starts with.
  struct Phase {
    std::int64_t period = 0;
    std::vector<std::uint64_t> first_keys;
    bool operator==(const Phase& o) const {
      return period == o.period && first_keys == o.first_keys;
    }
  };
  static constexpr std::size_t kKnownPhases = 8;
  static constexpr std::int64_t kPhaseKeys = 16;

  // `known`: periods an earlier detector locked onto; one found again keeps its phase.
  explicit PeriodDetector(std::int64_t max_period = 65536, std::int64_t start = 0,
                          std::vector<Phase> known = {});

  // Feeds the op at global position `pos` (consecutive, starting at `start`): `key` hashes the
  // op with its metadata, `name` the operator name alone. Appends to `boundaries` each position
  // at which an iteration now known to be complete ends (= where the next starts), ascending.
  void feed(std::int64_t pos, std::uint64_t key, std::uint64_t name,
            std::vector<std::int64_t>& boundaries);

  std::int64_t period() const { return locked_ ? period_ : 0; }
  // Where the next iteration should start if the loop keeps its period (locked only).
  std::int64_t expected_boundary() const { return locked_ ? last_boundary_ + period_ : -1; }
  bool locked() const { return locked_; }
  // Oldest position still held; ops before it can no longer become part of an iteration.
  std::int64_t history_start() const { return h0_; }
  // Number of times a locked period was abandoned.
  std::int64_t losses() const { return losses_; }
  const std::vector<Phase>& known() const { return known_; }

 private:
  struct Hypothesis {
    std::int64_t p;
    std::int64_t since;
  };
  std::uint64_t key_at(std::int64_t pos) const {
    return keys_[static_cast<std::size_t>(pos - h0_)];
  }
  std::uint64_t name_at(std::int64_t pos) const {
    return names_[static_cast<std::size_t>(pos - h0_)];
  }
  void boundary(std::int64_t b, std::vector<std::int64_t>& boundaries);
  bool equal_ranges(std::int64_t a, std::int64_t b, std::int64_t n) const;
  void lock(std::int64_t p, std::int64_t pos, std::vector<std::int64_t>& boundaries);
  std::int64_t choose_phase(std::int64_t p, std::int64_t pos) const;
  // The rotation r of the last whole period [w, w + p) that starts a known phase, or -1.
  std::int64_t known_rotation(std::int64_t p, std::int64_t w) const;
  void remember(std::int64_t p, std::int64_t pos, std::int64_t phase);
  void restart(std::int64_t at);
  void trim(std::int64_t keep);

  std::int64_t max_period_;
  std::int64_t h0_;
  std::vector<std::uint64_t> keys_;
  std::vector<std::uint64_t> names_;
  // search state
  std::unordered_map<std::uint64_t, std::vector<std::int64_t>> last_positions_;
  std::vector<Hypothesis> hypotheses_;
  std::unordered_set<std::int64_t> banned_;
  // locked state
  bool locked_ = false;
  std::int64_t period_ = 0;
  std::int64_t last_boundary_ = 0;
  std::vector<std::uint64_t> anchor_;  // op names that start an iteration
  std::uint32_t recent_bad_ = 0;       // bit i: iteration i back was not P ops long (i < 2)
  std::int64_t losses_ = 0;
  std::vector<Phase> known_;
};

}  // namespace hotpath::detail
