// Replaying a hot iteration as CUDA graphs (Config::replay). Once a plan has run unchanged for a
// while, one iteration runs it as always while every op of it is also captured, on a side stream
// and into a private memory pool, as a shadow of itself: the shadow computes nothing (a capture
// only records), so a capture that fails leaves the iteration's results as they were. Later
// iterations that match the plan only guard each op (its inputs must be where the captured
// iteration's were, an eager op's scalars what they were) and hand out its outputs on the
// addresses its shadow had; each segment's graph launches once, at the segment's end: before an
// op the host waits on (item(), a copy to the CPU) and at the iteration's end. A fused kernel's
// scalars (a learning rate, Adam's bias corrections) reach its graph node as new parameters.
//
// Memory: a segment's shadows are all kept until the segment ends, so that within a segment no
// two values share memory; between segments the pool reuses what the program let go of. A value
// the program still holds when a later launch would overwrite its memory (a loss kept from the
// last step) is copied out first: its storage gets the copy. Nothing the program holds is ever
// overwritten; an op that leaves the captured iteration computes what is pending eagerly first.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/StorageImpl.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/SmallVector.h>
#include <c10/util/flat_hash_map.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dispatch/op_call.h"
#include "dispatch/op_record.h"

namespace at::cuda {
struct CUDAGraph;
}

namespace hotpath::detail {

struct PlanOp;
struct PlanGroup;
class CudaModule;

// Fused iterations in a row (none left the plan) before a plan's iteration is captured.
constexpr std::int64_t kReplayAfter = 10;
// Captures tried per plan, and replayed iterations that may leave the plan, before replay is off.
constexpr int kReplayAttempts = 2;
constexpr int kReplayDivergences = 3;

// The tensors among an op's returns on `stack`, in order (a list's in order); the address a
// tensor's data starts at (nullptr: undefined, or no storage).
std::vector<at::Tensor> returned_tensors(const torch::jit::Stack& stack, std::size_t nret);
const void* data_address(const at::TensorBase& t);

class Replay {
 public:
  enum class Kind : unsigned char {
    kGraph,  // captured: replayed by its segment's graph
    kView,   // a view (no kernel): run as it is, in capture and replay alike
    kLive,   // the host waits on it, or it runs on the CPU: ends a segment, runs eagerly
  };
  Replay(int device, std::int64_t epoch, std::size_t ops);
  ~Replay();  // what the program still holds of replayed iterations is copied out first
  Replay(const Replay&) = delete;
  Replay& operator=(const Replay&) = delete;

  std::int64_t epoch() const { return epoch_; }
  bool ready() const { return ready_; }
  bool failed() const { return !failure_.empty(); }
  const std::string& failure() const { return failure_; }

  // ---- Capture: the iteration runs its plan as always; each op is captured beside it.
  void begin_capture(std::int64_t iter_start);
  // Before op `index` runs: its kind (after this, failed() if it cannot be captured).
  Kind capture_op(std::size_t index, const PlanOp& p, const OpRecord& rec, const TensorPtrs& inputs,
                  const c10::OperatorHandle& op);
  // An op the plan ran eagerly (not in a fused group): its arguments as they were before it ran,
  // and the stack after it (its outputs).
  void capture_eager(std::size_t index, const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                     torch::jit::Stack args, const torch::jit::Stack& outputs);
  // A fused group the plan launched on its own kernel: the launch's scalars, grid and workspace;
  // the members' outputs (per member, per output; undefined where nobody held one).
  struct Launch {
    const PlanGroup* group = nullptr;
    std::vector<std::size_t> indices;  // the members' positions in the plan
    std::vector<const PlanOp*> members;
    std::vector<float> scalars;
    unsigned blocks = 0;
    long long numel64 = 0;
    int numel32 = 0;
    int vector_ok = 0;
    at::Tensor workspace;  // the group's (its kernel's partial sums and counters), or none
    std::vector<std::vector<at::Tensor>> outputs;
  };
  void capture_launch(const Launch& l);
  void end_capture();  // the iteration completed: replay is ready (unless failed())
  void fail(const std::string& why);

  // ---- Replay: an iteration that matches the plan.
  void begin_replay(std::int64_t iter_start);
  enum class Step { kHandled, kEager, kLeave };
  // The op at `index` (guarded against the plan already). kHandled: its outputs are on the
  // stack; kEager: run it eagerly (a view, or an op the host waits on: the pending graph has
  // launched); kLeave: it differs from the captured iteration (`why`): call leave().
  Step replay_op(std::size_t index, const PlanOp& p, const OpRecord& rec, const TensorPtrs& inputs,
                 const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack,
                 std::string& why);
  void end_replay();  // the iteration's last op: its last graph launches
  void leave();       // the iteration leaves the plan: what is pending runs eagerly

  // References the deferred calls of a replayed iteration hold to `t` (Executor::in_place_twin).
  int references(const at::Tensor& t) const;

  // For stats().
  std::int64_t replayed() const { return replayed_; }
  std::int64_t rescued() const { return rescued_; }
  std::int64_t pool_bytes() const { return pool_bytes_; }
  int graphs() const { return static_cast<int>(segments_.size()); }

 private:
  struct Out {
    void* base = nullptr;  // the storage's data (nullptr: no fresh output here)
    std::size_t nbytes = 0;
    std::int64_t offset = 0;
    int released_after = -1;  // the segment after whose end the pool may reuse it; -1: the last
    TensorMeta meta;          // the shadow's sizes, strides and dtype
  };
  struct OpRecipe {
    Kind kind = Kind::kView;
    int segment = -1;
    c10::SmallVector<const void*, 4> input_ptrs;               // per rec.inputs entry (kGraph)
    std::vector<std::pair<std::size_t, c10::IValue>> scalars;  // eager kGraph ops
    c10::SmallVector<Out, 1> outs;                             // per output (kGraph)
  };
  struct Node {
    void* node = nullptr;  // CUgraphNode
    std::shared_ptr<CudaModule> kernel;
    unsigned blocks = 0, block = 0;
    std::vector<std::uint64_t> words;  // one per kernel parameter
    // Scalar parameters: (parameter, op index, argument) to read each replay's value from.
    std::vector<std::tuple<std::size_t, std::size_t, std::size_t>> scalars;
    at::Tensor workspace;
  };
  struct Segment {
    std::unique_ptr<at::cuda::CUDAGraph> graph;
    std::vector<Node> nodes;
  };
  // A value of the captured iteration: its shadow, and the program's tensor's storage (when
  // nobody holds that any more, neither does the shadow at the segment's end).
  struct Shadow {
    at::Tensor tensor;
    c10::weak_intrusive_ptr<c10::StorageImpl> real{c10::intrusive_ptr<c10::StorageImpl>()};
    std::size_t op = 0;
    int out = -1;  // the recipe's output (fresh outputs), or -1
  };
  // An input of a captured op: an earlier op's value (its shadow) or a tensor from outside.
  struct Input {
    std::int32_t argument = 0;
    ValueRef ref;  // producer relative to the iteration; producer < 0: outside
    at::Tensor outside;
  };
  // A replayed op's deferred call (for leave()).
  struct Record {
    std::size_t index = 0;
    c10::OperatorHandle op;
    c10::DispatchKeySet keys;
    c10::SmallVector<c10::IValue, 6> args;
  };
  struct Handed {
    c10::weak_intrusive_ptr<c10::StorageImpl> storage;
    std::int64_t iteration = 0;
    int released_after = -1;
  };

  void open_segment();
  void close_segment();
  at::Tensor shadow_at(std::size_t index, std::size_t k) const;  // its input k's shadow
  at::Tensor shadow_of(std::size_t index, std::int32_t argument, int element) const;
  void keep_shadow(std::size_t index, int out, const at::Tensor& shadow, const at::Tensor& real,
                   bool fresh);
  // A tensor on the memory output k of op `index` had in the captured iteration.
  at::Tensor placeholder(std::size_t index, std::size_t k) const;
  void rescue(int segment);
  void launch_pending();
  void release();

  int device_;
  std::int64_t epoch_;
  c10::cuda::CUDAStream side_;
  std::pair<unsigned long long, unsigned long long> pool_{0, 0};
  std::vector<OpRecipe> ops_;
  std::vector<Segment> segments_;
  bool ready_ = false;
  std::string failure_;
  // Capture.
  std::int64_t iter_start_ = 0;
  bool open_ = false;
  std::int64_t reserved_before_ = 0;
  ska::flat_hash_map<ValueRef, Shadow, ValueRefHash> shadows_;
  std::vector<std::vector<Input>> inputs_;  // per op, its inputs (capture only)
  // Replay.
  std::int64_t iteration_ = 0;
  std::vector<Record> records_;
  std::vector<Handed> handed_;
  std::int64_t replayed_ = 0;
  std::int64_t rescued_ = 0;
  std::int64_t pool_bytes_ = 0;
};

}  // namespace hotpath::detail
