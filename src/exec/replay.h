// Replaying a hot iteration as CUDA graphs (Config::replay). Once a plan has run unchanged for a
// while, one iteration runs it as always while every op of it is also captured, on a side stream
// and into a private memory pool, as a shadow of itself: the shadow computes nothing (a capture
// only records), so a capture that fails leaves the iteration's results as they were. Later
// iterations that match the plan only guard each op (its inputs must be where the captured
// iteration's were, an eager op's scalars what they were) and hand out its outputs on the
// addresses its shadow had. Each stretch between ops the host waits on (item(), a copy to the
// CPU) is cut into segments of about Config::replay_graph_ops ops, one graph each, launched
// when the next segment's first op (or an op the host waits on, or the iteration's end) comes:
// the GPU runs it while the host goes through the next. A fused kernel's scalars (a learning
// rate, Adam's bias corrections) reach its graph node as new parameters.
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

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "dispatch/op_call.h"
#include "dispatch/op_record.h"
#include "exec/replay_values.h"

namespace at::cuda {
struct CUDAGraph;
}

namespace hotpath::detail {

struct PlanOp;
struct PlanGroup;
class CudaModule;
class ReplayLauncher;  // exec/replay_launcher.h

// Fused iterations in a row (none left the plan) before a plan's iteration is captured.
constexpr std::int64_t kReplayAfter = 10;
// ... for a plan an earlier run kept replayed (a known winner whose replay won): the governor
// tries no other configuration first, and every iteration it runs unreplayed forgoes replay's
// savings (on the MLP example 0.3-0.4 ms a step: eight of them cost as much as the capture).
constexpr std::int64_t kReplayAfterKnown = 2;
// ... for one whose capture is held until the run can pay for it (Plan::replay_held), if the
// governor has not let it go ahead by then (it does within Governor::kReplayHoldMax fused
// iterations it has timed).
constexpr std::int64_t kReplayHeldAtMost = 64;
// Captures tried per plan, and replayed iterations that may leave the plan, before replay is off.
constexpr int kReplayAttempts = 2;
constexpr int kReplayDivergences = 3;
constexpr std::size_t kReplayRelearns = 8;
// Inputs from outside the iteration up to this size are read through a static copy refreshed
// each replay (unless they are parameters or state the iteration writes): a batch that has not
// moved yet may move later, and such a copy costs the GPU about a microsecond. Larger ones are
// read where they are unless they were seen to move (an input that moves later leaves replay for
// a new capture that copies it): a copy of each 64 MiB input at every replay made RoPE's
// replayed step 0.28 ms against the plan's 0.07.
constexpr std::size_t kStaticMaxBytes = std::size_t{1} << 20;

// LibTorch makes a device's pool of streams at its first request (dozens of streams: they cost
// the iteration before the first capture milliseconds). Called on the side worker after the
// device's interpreter kernel loads, so that a Replay's side stream is ready when the loop's
// thread asks.
void prepare_replay_streams(int device);

// The tensors among an op's returns on `stack`, in order (a list's in order); the address a
// tensor's data starts at (nullptr: undefined, or no storage).
std::vector<at::Tensor> returned_tensors(const torch::jit::Stack& stack, std::size_t nret);
const void* data_address(const at::TensorBase& t);
// The bytes from a tensor's first element to its last, as it is laid out.
std::int64_t span_bytes(const at::TensorBase& t);
// A tensor's elements in their logical order as one dimension of bytes: a view where its layout
// allows, else a copy (one element with a stride other than 1 included).
at::Tensor element_bytes(const at::Tensor& t);
// Copies n bytes on `device` (its current stream), a raw cudaMemcpyAsync: nothing through ATen.
void copy_bytes(void* dst, const void* src, std::int64_t n, int device);
// runtime/fingerprint.cuh's kernel on `device`, once the interpreter's module is loaded (it
// carries it; exec/kernels.cpp); null before, or where it could not load.
std::shared_ptr<const CudaModule> fingerprint_kernel(int device);
// Ops the graph after `cut` graphs of a stretch takes before it is cut (graph_ops:
// Config::replay_graph_ops, > 0): a quarter of graph_ops for the first, half for the second, then
// graph_ops, at least one. A stretch starts the GPU after a few ops, then hands it larger graphs.
inline int graph_size(int graph_ops, int cut) {
  return std::max(1, graph_ops >> std::max(0, 2 - cut));
}
// Per op, how many ops from it on run before the next place where no fused group has members on
// both sides (where a captured stretch may be cut into another graph; the plan's end is one): 1
// where a cut is possible again right after the op. `groups`: per op, the fused group it is
// deferred into, or -1 (it runs eagerly, or its group is off). The groups of a batch count one by
// one: a capture that cuts a batch launches the groups before the cut first
// (Executor::flush_finished).
std::vector<std::uint32_t> uncut_runs(const std::vector<int>& groups);
// Whether a captured stretch is cut into a new graph before an op: only where no fused group is
// pending, and once the open graph has `limit` ops (graph_size), or has some and the ops from this
// one on cannot be cut for `limit` ops or more (`run`: uncut_runs). An optimizer's update of a
// large parameter is such a run: cut before it, the backward's last products launch before the
// host walks the update's ops, not after the whole optimizer step (as one joint launch at its end
// kept them: the GPU idled while the host walked it).
inline bool cut_before(int segment_ops, int limit, std::uint32_t run, bool between_groups) {
  return between_groups && segment_ops > 0 &&
         (segment_ops >= limit || run >= static_cast<std::uint32_t>(limit));
}
// References to `t` that `args` hold, in a list (a stack's inputs) too.
int count_refs(const at::Tensor& t, c10::ArrayRef<c10::IValue> args);

// What a capture makes of an op (replay_ops.cpp):
// - the host waits on it (its result decides what the host does next): it ends a segment and
//   runs eagerly between graphs;
bool host_waits(std::string_view name);
// - a view: a return that aliases an argument without writing it (no kernel runs);
bool is_view(const c10::FunctionSchema& schema);
// - it changes a tensor's metadata in place and reads no data (t_, squeeze_, set_, set_data): run
//   as it is, as a view is (a graph would leave the tensor's sizes as they were);
bool changes_view(const c10::OperatorHandle& op, std::string_view name);
// - it resizes a tensor in place (resize_, resize_as_: tagged as in-place views, but a larger
//   size reallocates and copies the data, which the graphs before it may not have written yet,
//   and a replayed output's memory cannot grow): not captured, the signature's iterations run
//   by its plan.
bool resizes(std::string_view name);
// - it draws random numbers (it starts a graph of its own, Replay::capture_op): by its name, and
//   by its schema (a generator argument);
bool draws_random(std::string_view name);
bool draws_random(const c10::FunctionSchema& schema, std::string_view name);
// - it returns a list of new tensors (not captured).
bool returns_list(const c10::FunctionSchema& schema);

class Replay {
 public:
  enum class Kind : unsigned char {
    kGraph,  // captured: replayed by its segment's graph
    kView,   // a view (no kernel): run as it is, in capture and replay alike
    kLive,   // the host waits on it, or it runs on the CPU: ends a segment, runs eagerly
  };
  // graph_ops: Config::replay_graph_ops; launcher: Config::replay_launcher (a thread issues the
  // replays' graph launches: exec/replay_launcher.h).
  Replay(int device, std::int64_t epoch, std::size_t ops, int graph_ops, bool launcher = false);
  ~Replay();  // what the program still holds of replayed iterations is copied out first
  Replay(const Replay&) = delete;
  Replay& operator=(const Replay&) = delete;

  std::int64_t epoch() const { return epoch_; }
  // Host time of the captured iteration, from its first op to its graphs instantiated (the
  // iteration's own work included): what replay costs once, beside its savings.
  double capture_ms() const { return capture_ms_; }
  // Where the capture's host time went (a debug line at its end): opening and closing the
  // segments' stream captures, instantiating their graphs, the shadows' ops and kernel nodes
  // (their allocations from the pool included), and the caching allocator's new segments
  // (cudaMalloc calls) it took.
  struct CaptureCost {
    double streams_ms = 0, instantiate_ms = 0, shadows_ms = 0;
    double pool_ms = 0;  // growing the pool first (grow_pool)
    // The read-only inputs' bytes kept before and after their ops' own runs, and the wait for
    // them and their comparison at the capture's end (of checks_ms, wait_ms).
    double checks_ms = 0, wait_ms = 0;
    std::int64_t mallocs = 0;
  };
  const CaptureCost& capture_cost() const { return cost_; }
  bool ready() const { return ready_; }
  bool failed() const { return !failure_.empty(); }
  const std::string& failure() const { return failure_; }

  // ---- Observation, the iteration before the capture: where each op's inputs from outside the
  // iteration are. One that is elsewhere in the captured iteration moves between iterations (a
  // batch): the graph reads a copy of it that each replay refreshes, as it does a CPU copy's.
  void begin_observe(std::int64_t iter_start) {
    iter_start_ = iter_start;
    observed_.assign(ops_.size(), {});
  }
  bool observing() const { return !observed_.empty() && inputs_.empty() && !ready_; }
  void observe(std::size_t index, const OpRecord& rec, const TensorPtrs& inputs);

  // ---- Capture: the iteration runs its plan as always; each op is captured beside it.
  // runs: uncut_runs of the plan's ops as the iteration runs them (where a graph may end).
  void begin_capture(std::int64_t iter_start, std::vector<std::uint32_t> runs);
  // No graph was begun yet (the ops so far ran eagerly beside the capture: views).
  bool nothing_captured() const { return segments_.empty() && !open_; }
  // Before op `index` runs: its kind (after this, failed() if it cannot be captured).
  // `between_groups`: no fused group or batch is pending (a graph may end before this op).
  Kind capture_op(std::size_t index, const PlanOp& p, const OpRecord& rec, const TensorPtrs& inputs,
                  const c10::OperatorHandle& op, bool between_groups);
  // An op the plan ran eagerly (not in a fused group; a view; an op the host waits on): its
  // arguments as they were before it ran, and the stack after it (its outputs).
  void capture_eager(std::size_t index, const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                     torch::jit::Stack args, const torch::jit::Stack& outputs);
  // Around that op's own run: whether it left the inputs its graph reads through copies as they
  // were. One that wrote such an input (its schema says it only reads it) would write the copy in
  // each replay, and the tensor the loop holds would keep its captured value. Before the run, the
  // bytes of each, and after it, copied to the host; end_capture compares them (after one wait)
  // and fails the capture where one changed.
  void before_own_run(std::size_t index, const c10::OperatorHandle& op,
                      const torch::jit::Stack& args);
  void after_own_run(std::size_t index);
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
    std::int64_t* launches = nullptr;  // the group's count of launches: each replay adds one
    std::vector<std::vector<at::Tensor>> outputs;
  };
  void capture_launch(const Launch& l);
  // Groups of a batch the plan launched together through their kernel's multi entry (an
  // optimizer's update of each parameter): one graph node, as in the plan.
  void capture_batch(const std::vector<Launch>& launches);
  // Whether the capture would cut the open graph before op `index` if no fused group were
  // pending there (cut_before): the executor then launches the groups that are complete, and
  // capture_op cuts where none is.
  bool cut_wanted(std::size_t index) const;
  void end_capture();  // the iteration completed: replay is ready (unless failed())
  void fail(const std::string& why);

  // ---- Replay: an iteration that matches the plan.
  void begin_replay(std::int64_t iter_start);
  // The last iteration's references to its values (ReplayValues::begin): let go of on the
  // launcher's thread where there is one (the TensorImpls of the values that died are freed
  // there), else here.
  void let_go(std::vector<ReplayValues::Kept> kept);
  enum class Step { kHandled, kEager, kLeave };
  // The op at `index` (guarded against the plan already). kHandled: its outputs are on the
  // stack; kEager: run it eagerly (a view, or an op the host waits on: the pending graph has
  // launched); kLeave: it differs from the captured iteration (`why`): call leave().
  // `inputs`: its tensors; `refs` and `written`: where each came from and whether the op writes
  // it; its arguments are on `stack`.
  Step replay_op(std::size_t index, const PlanOp& p, const TensorPtrs& inputs,
                 c10::ArrayRef<ValueRef> refs, c10::ArrayRef<std::uint8_t> written,
                 const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack,
                 std::string& why);
  void end_replay();  // the iteration's last op: its last graph launches
  // After kLeave: the input from outside the iteration (op, input) that was not where the
  // captured iteration had it, if that was why. A capture that knows it moves reads a copy.
  std::optional<std::pair<std::size_t, std::size_t>> moved_input() const { return moved_input_; }
  void set_moved(std::set<std::pair<std::size_t, std::size_t>> moved) { moved_ = std::move(moved); }
  // The memory pool an earlier capture of the plan took (bytes; 0: not known), and of it the
  // segments of small blocks: begin_capture grows this one's pool to that much first (grow_pool).
  void set_pool_hint(std::int64_t bytes, std::int64_t small_bytes) {
    pool_hint_ = bytes;
    pool_small_hint_ = small_bytes;
  }
  void leave();  // the iteration leaves the plan: what is pending runs eagerly
  // Whether this replay took any op into its graphs yet (kHandled); before that its ops ran
  // eagerly (views, ops the host waits on), and leaving costs replay nothing.
  bool handed_any() const { return handed_any_; }
  // Whether op `index` is a view, run as it is in replay (Kind::kView).
  bool view(std::size_t index) const {
    return index < ops_.size() && ops_[index].kind == Kind::kView;
  }

  // What the deferred calls of a replayed iteration hold of `t` (Executor::in_place_twin):
  // references to it, and distinct views of it (each holds its base and shares its storage); the
  // calls of launches handed to the launcher, not yet let go of, included. In eager the ops that
  // read those views had run and let them go before autograd accumulated.
  struct Held {
    int references = 0;
    int views = 0;
  };
  Held held(const at::Tensor& t) const;

  // For stats().
  std::int64_t replayed() const { return replayed_; }
  std::int64_t rescued() const { return rescued_; }
  // Static copies refreshed by a copy node of their graph, and how often a replay pointed one at
  // a new address (the rest are copied by the host before their graph launches).
  int static_nodes() const;
  std::int64_t repointed() const { return repointed_; }
  std::int64_t pool_bytes() const { return pool_bytes_; }
  std::int64_t pool_small_bytes() const { return pool_small_bytes_; }  // of it, small segments
  // The launcher thread's time issuing this replay's graphs (us), and the graph launches it
  // issued; 0 where the loop's thread launches them.
  double launcher_us() const;
  std::int64_t launcher_launches() const;
  // Outputs handed out as placeholders the launcher's thread had made ahead (premake).
  std::int64_t premade_outputs() const { return premade_taken_; }
  int graphs() const {  // the ones launched (Segment::empty are not)
    return static_cast<int>(std::count_if(segments_.begin(), segments_.end(),
                                          [](const Segment& s) { return !s.empty; }));
  }

 private:
  struct Out {
    void* base = nullptr;  // the storage's data (nullptr for an output of no bytes too)
    bool kept = false;     // a fresh output here, its shadow kept (keep_shadow)
    std::size_t nbytes = 0;
    std::int64_t offset = 0;
    int released_after = -1;  // the segment after whose end the pool may reuse it; -1: the last
    TensorMeta meta;          // the shadow's sizes, strides and dtype
    // A fused group's output its kernel may skip (Node::optional[opt_slot] of node opt_node in
    // its segment), or -1.
    int opt_node = -1, opt_slot = -1;
  };
  struct OpRecipe {
    Kind kind = Kind::kView;
    int segment = -1;
    c10::SmallVector<const void*, 4> input_ptrs;               // per rec.inputs entry (kGraph)
    std::vector<std::pair<std::size_t, c10::IValue>> scalars;  // eager kGraph ops
    c10::SmallVector<Out, 1> outs;                             // per output (kGraph)
    // Inputs that move between iterations: the static copy the graph reads instead.
    struct Static {
      std::uint32_t input = 0;
      int copy = 0;  // index into statics_
      // What the graph's reader computes depends on where the data lies (rms_norm, which takes
      // ATen's vectorized path on aligned data): its static copy is aligned, so a replay whose
      // input is not aligned to this many bytes leaves the graphs (0: anywhere).
      int align_bytes = 0;
    };
    c10::SmallVector<Static, 1> statics;
  };
  struct Node {
    void* node = nullptr;  // CUgraphNode
    std::shared_ptr<CudaModule> kernel;
    bool multi = false;  // the kernel's multi entry: a batch of groups in one launch
    unsigned blocks = 0, block = 0;
    // One per kernel parameter; of a multi entry, its one parameter (the segments) in words.
    std::vector<std::uint64_t> words;
    // Scalar parameters: (word, op index, argument) to read each replay's value from.
    std::vector<std::tuple<std::size_t, std::size_t, std::size_t>> scalars;
    at::Tensor workspace;
    std::vector<std::int64_t*> launches;  // the groups' counts (PlanGroup::launches)
    // Outputs of its groups that nothing after the group may read (an intermediate value of the
    // group's): as the plan does, the kernel writes one only where, at the launch, someone
    // besides the group's own members holds it (the program, autograd, a view of it); the word
    // holds its shadow's address or null. `members`: each group's op indices.
    struct Optional {
      std::size_t word = 0, op = 0, group = 0;
      void* shadow = nullptr;
      bool handed = false;  // handed out in this replay (else: written)
      c10::weak_intrusive_ptr<c10::TensorImpl> tensor{c10::intrusive_ptr<c10::TensorImpl>()};
      c10::weak_intrusive_ptr<c10::StorageImpl> storage{c10::intrusive_ptr<c10::StorageImpl>()};
    };
    std::vector<Optional> optional;
    std::vector<std::vector<std::size_t>> members;
  };
  struct Segment {
    std::unique_ptr<at::cuda::CUDAGraph> graph;
    std::vector<Node> nodes;
    // Its first op draws random numbers from the device's default generator (the only op that
    // does: each starts a graph of its own). A replay launches it through CUDAGraph::replay(),
    // which first points the graph's random numbers where eager's would be drawn now and moves
    // the generator past them.
    bool random = false;
    // Its ops made no kernel (allocations only, ended before a random op's graph): never launched.
    bool empty = false;
    // This replay's launch of it: its nodes with new parameters (update_nodes), and through the
    // launcher the host-side copies before it and the stream. Filled before the launch is handed
    // over and read by the launcher's thread; the next fill comes after settle().
    struct Copy {
      void* dst = nullptr;
      const void* src = nullptr;
      std::size_t bytes = 0;
    };
    std::vector<const Node*> launch_nodes;
    std::vector<Copy> launch_copies;
    cudaStream_t launch_stream = nullptr;
  };
  // A value of the captured iteration: its shadow, and the program's tensor's storage (when
  // nobody holds that any more, neither does the shadow at the segment's end).
  struct Shadow {
    at::Tensor tensor;
    c10::weak_intrusive_ptr<c10::StorageImpl> real{c10::intrusive_ptr<c10::StorageImpl>()};
    std::size_t op = 0;
    int out = -1;  // the recipe's output (fresh outputs), or -1
    bool moving =
        false;  // elsewhere each iteration (made by an op outside the graphs, or a view of such)
  };
  // An input of a captured op: an earlier op's value (its shadow) or a tensor from outside.
  struct Input {
    std::int32_t argument = 0;
    ValueRef ref;  // producer relative to the iteration; producer < 0: outside
    at::Tensor outside;
    bool moving = false;   // from outside, and not where it was in the observed iteration
    bool written = false;  // written in place (Tensor(a!))
    bool saved = false;    // a value of the iteration through another tensor (ref names it)
  };
  // An input an op's own run must leave as it was (before_own_run): its fingerprints before and
  // after the run (slots of prints_), or where the device has no fingerprint kernel its bytes in
  // pinned host memory.
  struct ReadOnly {
    std::size_t index = 0;
    std::size_t k = 0;  // which of the op's inputs
    std::string op;
    at::Tensor input;  // until the op has run
    std::int64_t before_print = -1, after_print = -1;
    at::Tensor before, after;
  };
  // The input's fingerprint into a new slot of prints_ on the current stream (its number), or
  // its bytes in pinned host memory into `host` (-1) unless `fingerprint` and the device has the
  // fingerprint kernel (exec/replay_checks.cpp).
  std::int64_t keep_bytes(const at::Tensor& t, at::Tensor& host, bool fingerprint);
  // end_capture's check: after one wait, whether each read-only input came out of its op's run
  // as it went in; throws, naming the op, where one did not.
  void check_read_only();
  // A replayed op's deferred call (for leave()).
  struct Record {
    std::size_t index = 0;
    c10::OperatorHandle op;
    c10::DispatchKeySet keys;
    c10::SmallVector<c10::IValue, 6> args;
  };
  using Handed = c10::weak_intrusive_ptr<c10::StorageImpl>;

  void open_segment();
  void close_segment();
  // A captured launch's members: their recipes and their outputs' shadows (capture_launch's and
  // capture_batch's). Then its words from `w` on (its tensors' shadows, numel, vector_ok), its
  // scalars noted in `n` (from word `first` on).
  void shadow_members(const Launch& l);
  void launch_words(const Launch& l, std::uint64_t* w, std::size_t first, Node& n);
  at::Tensor shadow_at(std::size_t index, std::size_t k) const;  // its input k's shadow
  bool moving(std::size_t index, std::size_t k) const;
  // The value of this iteration whose (real) storage `t` is on, if any.
  std::optional<ValueRef> saved_value(const at::Tensor& t) const;
  // What a graph op reads for its input k: the shadow, or for a moving input its static copy.
  at::Tensor graph_input(std::size_t index, std::size_t k, bool written);
  at::Tensor shadow_of(std::size_t index, std::int32_t argument, int element);
  // Which of op `index`'s inputs is its tensor at (argument, element).
  std::size_t input_at(std::size_t index, std::int32_t argument, int element) const;
  // Its input k, where it is a static copy, must be aligned to `bytes` in a replay.
  void require_alignment(std::size_t index, std::size_t k, int bytes);
  // require_alignment for the inputs of an eager op captured in a graph (its arguments `args`).
  void eager_alignment(std::size_t index, const c10::OperatorHandle& op,
                       const torch::jit::Stack& args);
  void keep_shadow(std::size_t index, int out, const at::Tensor& shadow, const at::Tensor& real,
                   bool fresh, bool moving = false);
  // A tensor on the memory output k of op `index` had in the captured iteration.
  at::Tensor placeholder(std::size_t index, std::size_t k) const;
  // The one to hand out in a replay: made ahead on the launcher's thread where one is ready
  // (premake), else made now.
  at::Tensor take_placeholder(std::size_t index, std::size_t k);
  // After a replay's last launch: the launcher's thread makes the placeholders the replay handed
  // out again, for the next replays (once its last such job has run).
  void premake();
  // Before segment `segment` launches: what the program still holds on memory it may overwrite
  // (handed out in an earlier replay, or released in the capture before that segment) gets a
  // copy of its own. The latest replay's other tensors wait in their buckets.
  void rescue(int segment);
  void rescue(std::vector<Handed>& due);
  void launch_pending();
  // Launcher (Config::replay_launcher): segment `seg`'s launch handed to its thread, with its
  // kernel nodes' new parameters (Segment::launch_nodes) and the copies of moving inputs
  // (refills_, into Segment::launch_copies); the deferred calls (records_) and the refilled values
  // stay alive until it has been issued.
  void submit_launch(int seg);
  void issue(int seg) const;  // on the launcher's thread: what submit_launch handed over
  // Returns once every handed launch has been issued (before the loop's thread puts other work on
  // the stream, or reads or lets go of what they use), and lets go of what they held.
  void settle();
  void reclaim();  // lets go of what issued launches held
  // The capture is ready: the launcher's thread started, and a first empty issue through it
  // waited for (one that cannot start leaves the launches on the loop's thread, with a log line).
  void start_launcher();
  // The launch_pending part that makes the segment's nodes' parameters this replay's: the nodes
  // whose parameters changed, into s.launch_nodes.
  void update_nodes(Segment& s, int seg);
  static void set_params(void* exec, const Node& n);  // a kernel node's words, in its graph
  // The deferred record of op `index` in the segment about to launch, or nullptr.
  const Record* deferred(std::size_t index) const;
  // Whether the group's kernel must write optional output `o` in this replay (Node::optional).
  bool written(const Node& n, const Node::Optional& o) const;
  void release();
  // The capture's pool grown to `bytes` before the capture, `small_bytes` of it in segments of
  // small blocks: one large block of the rest and two 1 MiB blocks a small segment, allocated on
  // the side stream into the pool and freed there, so that the shadows' allocations split them
  // instead of opening a segment each (a cudaMalloc on the loop's thread or autograd's while the
  // side stream captures, about 0.2 ms each on an H200, nine in the MLP example's capture). The
  // pool is kept (pool_ref_) until the first graph's capture holds it.
  void grow_pool(std::int64_t bytes, std::int64_t small_bytes);
  void release_pool_ref();

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
  int graph_ops_;
  int segment_ops_ = 0;     // ops captured into the open segment
  int stretch_graphs_ = 0;  // graphs cut by size since the stretch began (graph_limit)
  int graph_limit() const { return graph_size(graph_ops_, stretch_graphs_); }
  std::vector<std::uint32_t> runs_;  // begin_capture's
  std::chrono::steady_clock::time_point capture_began_;
  double capture_ms_ = 0;
  std::int64_t reserved_before_ = 0;
  std::int64_t mallocs_before_ = 0;
  std::int64_t pool_hint_ = 0, pool_small_hint_ = 0;  // set_pool_hint
  std::int64_t small_before_ = 0;  // the allocator's small segments' bytes at begin_capture
  bool pool_ref_ = false;          // grow_pool's reference to pool_, not yet released
  CaptureCost cost_;
  ska::flat_hash_map<ValueRef, Shadow, ValueRefHash> shadows_;
  std::vector<std::vector<Input>> inputs_;  // per op, its inputs (capture only)
  std::vector<ReadOnly> read_only_;         // before_own_run (capture only)
  std::vector<at::Tensor> prints_;  // fingerprint slots, kPrintSlots to a tensor (capture only)
  std::int64_t prints_used_ = 0;
  std::vector<std::vector<const void*>> observed_;  // per op, its outside inputs' addresses
  std::set<const void*> written_;  // outside inputs the observed iteration wrote in place
  ska::flat_hash_map<const c10::StorageImpl*, ValueRef> by_storage_;  // real storage -> value
  // Static copies of moving values, each refreshed once per replay before the first launch that
  // reads it; during the capture, by the value they copy.
  std::vector<at::Tensor> statics_;
  ska::flat_hash_map<const c10::TensorImpl*, int> static_of_outside_;
  ska::flat_hash_map<ValueRef, int, ValueRefHash> static_of_value_;
  std::vector<std::int64_t> static_filled_;  // the replay that last refreshed each
  // Per static copy, the copy node captured in the graph that first reads it (node null: the
  // host copies it in before that graph launches, refills_): the graph refreshes it itself, and a
  // replay only points the node where the input is now when that moved.
  struct StaticNode {
    int segment = -1;
    void* node = nullptr;  // cudaGraphNode_t
    const void* src = nullptr;
    std::size_t bytes = 0;
  };
  std::vector<StaticNode> static_nodes_;
  std::int64_t repointed_ = 0;  // node updates: a moving input at a new address
  std::vector<std::pair<int, at::Tensor>> refills_;      // pending: (static, its new value)
  std::set<std::pair<std::size_t, std::size_t>> moved_;  // (op, input) known to move
  std::optional<std::pair<std::size_t, std::size_t>> moved_input_;
  // Replay.
  std::int64_t iteration_ = 0;
  std::vector<Record> records_;
  // Tensors handed out: of earlier replays (due at the next launch), and of this one by the
  // first segment that may overwrite them (released_after + 1; never within it: the last).
  std::vector<Handed> carried_;
  std::vector<std::vector<Handed>> handed_;
  std::size_t handed_next_ = 0;  // buckets before it are rescued
  std::int64_t replayed_ = 0;
  bool handed_any_ = false;  // handed_any(), since begin_replay
  std::int64_t rescued_ = 0;
  std::int64_t pool_bytes_ = 0, pool_small_bytes_ = 0;
  // Launcher (settle, submit_launch): launches handed to it and what each holds until issued.
  bool use_launcher_ = false;
  std::unique_ptr<ReplayLauncher> launcher_;  // made when the capture is ready
  struct InFlight {
    std::uint64_t ticket = 0;
    std::vector<Record> records;
    std::vector<std::pair<int, at::Tensor>> refills;
  };
  std::deque<InFlight> in_flight_;
  std::vector<std::vector<Record>> spare_records_;  // their vectors, for records_ again
  std::int64_t launched_async_ = 0;
  // Placeholders made ahead (premake): a TensorImpl and a StorageImpl each, made on the launcher's
  // thread, so that handing an output out costs the loop's thread a move (making them was 9% of
  // the hook's time on a replayed op: benchmarks/results/2026-11-29-hook-profile.md). A job fills
  // the empty slots; the loop's thread reads the slots only once the launcher has run it
  // (premade_ticket_), and takes a slot's tensor out as it hands it over. A slot's tensor that
  // was not taken (its op ran another way, or inference mode was on) waits for a later replay.
  std::vector<std::size_t> premade_first_;  // per op, its outputs' first slot (kNoSlot: none)
  std::vector<at::Tensor> premade_;
  std::uint64_t premade_ticket_ = 0;  // the job that fills premade_ (0: none yet)
  bool premade_ready_ = false;        // it has run, as the loop's thread has seen
  bool premade_short_ = true;         // a slot was taken since the last job (or none ran yet)
  std::int64_t premade_taken_ = 0;
  static constexpr std::size_t kNoSlot = ~std::size_t{0};
};

}  // namespace hotpath::detail
