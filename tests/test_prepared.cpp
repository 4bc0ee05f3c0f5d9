// Known winners' plans built before their signatures are seen (Config::prepare_known): the trace
// file a run keeps (trace/trace_file.h), what tells a kept trace from the loop's, and which
// verdicts are known winners (policy/decisions.h). The plans themselves are built and taken on a
// GPU (test_gpu.cpp, "[prepared]").
#include <fcntl.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <catch2/catch.hpp>

#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "common/hash.h"
#include "dispatch/op_call.h"
#include "hotpath/hotpath.h"
#include "policy/decisions.h"
#include "session/session.h"
#include "temp_dir.h"
#include "trace/trace_file.h"

using namespace hotpath::detail;

namespace {

// One iteration whose ops carry every kind of argument a trace file holds: tensors, ints, int
// lists, bools, doubles and ints as Scalars, a string, a dtype, a device, None.
void varied_step(const torch::Tensor& a, const torch::Tensor& b) {
  auto h = torch::gelu(a * b, "tanh");
  auto s = h.sum({1}, /*keepdim=*/true).mul(0.5).add(b.sum(1, true), 2);
  auto z = torch::zeros({4, 1}, a.options());
  auto out = torch::softmax(s + z, 0).to(torch::kDouble);
  (void)out;
}

// The hot trace the recorder hands on when `step` runs `steps` times with a threshold of 3 (after
// each a step() where `marked`); `first_sight`: the signature a known winner, hot at its first
// iteration.
HotTrace hot_trace_of(const std::function<void()>& step, int steps, bool marked,
                      bool first_sight = false) {
  hotpath::disable_hot_path_detection();
  hotpath::Config c;
  c.threshold = 3;
  c.remember = false;
  c.fuse = false;
  c.log_level = hotpath::LogLevel::Warn;
  hotpath::enable_hot_path_detection(c);
  std::vector<HotTrace> hot;
  thread_session()->recorder.set_hot_listener([&](HotTrace&& t) { hot.push_back(std::move(t)); });
  if (first_sight) thread_session()->recorder.set_instant_hot([](std::uint64_t) { return true; });
  for (int i = 0; i < steps; ++i) {
    step();
    if (marked) hotpath::step();
  }
  hotpath::disable_hot_path_detection();
  REQUIRE(hot.size() == 1);
  return std::move(hot[0]);
}

// The hot trace of varied_step.
HotTrace recorded_trace() {
  const auto a = torch::randn({4, 8});
  const auto b = torch::randn({4, 8});
  return hot_trace_of([&] { varied_step(a, b); }, 4, true);
}

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << bytes;
}

// The first op with an output, and the first argument that is a Scalar.
OpRecord& op_with_output(HotTrace& t) {
  for (OpRecord& op : t.ops)
    if (!op.output_alive.empty()) return op;
  FAIL("no op with an output");
  return t.ops.front();
}

std::pair<OpRecord*, std::size_t> scalar_argument(HotTrace& t) {
  for (OpRecord& op : t.ops)
    for (std::size_t i = 0; i < op.args.size() && i < 64; ++i)
      if ((op.scalar_mask >> i) & 1) return {&op, i};
  FAIL("no Scalar argument");
  return {nullptr, 0};
}

}  // namespace

TEST_CASE("a hot trace comes back from its file as it was", "[prepared]") {
  const HotTrace t = recorded_trace();
  REQUIRE(t.ops.size() >= 8);
  std::string why;
  const std::optional<std::string> bytes = encode_trace(t, &why);
  REQUIRE(bytes.has_value());
  CAPTURE(why);
  const std::optional<HotTrace> back = decode_trace(*bytes, &why);
  REQUIRE(back.has_value());
  CHECK(back->signature == t.signature);
  CHECK(back->iteration == t.iteration);
  CHECK(plan_input_difference(t, *back).empty());
  // Every field, the scalars' values among them: the same bytes again.
  CHECK(encode_trace(*back) == bytes);
  for (std::size_t i = 0; i < t.ops.size(); ++i) {
    CAPTURE(i, t.ops[i].name);
    CHECK(back->ops[i].name == t.ops[i].name);
    CHECK(back->ops[i].overload == t.ops[i].overload);
    CHECK(back->ops[i].args.size() == t.ops[i].args.size());
    CHECK(back->ops[i].inputs.size() == t.ops[i].inputs.size());
    CHECK(back->ops[i].args_key == t.ops[i].args_key);
    for (std::size_t k = 0; k < t.ops[i].inputs.size() && k < back->ops[i].inputs.size(); ++k)
      CHECK(back->ops[i].inputs[k].meta_key == t.ops[i].inputs[k].meta_key);
  }
  // The kinds of argument it went through.
  bool string = false, device = false, int_list = false, dbl = false;
  for (const OpRecord& op : back->ops) {
    for (const c10::IValue& a : op.args) {
      string = string || a.isString();
      device = device || a.isDevice();
      int_list = int_list || a.isIntList();
      dbl = dbl || a.isDouble();
    }
  }
  CHECK(string);
  CHECK(device);
  CHECK(int_list);
  CHECK(dbl);
}

TEST_CASE("an op's arguments key leaves its tensors' metadata to their own keys", "[prepared]") {
  // A replayed op is guarded by its arguments' key (OpRecord::args_key) and, where the iteration's
  // own table of values does not vouch for an input, by that input's metadata key
  // (TensorInput::meta_key, input_meta_key): together they say what the input key says.
  const auto a = torch::randn({4, 8}), b = torch::randn({4, 8});
  const auto wide_a = torch::randn({4, 16}), wide_b = torch::randn({4, 16});
  const HotTrace narrow = hot_trace_of([&] { varied_step(a, b); }, 4, true);
  const HotTrace wide = hot_trace_of([&] { varied_step(wide_a, wide_b); }, 4, true);
  REQUIRE(narrow.ops.size() == wide.ops.size());
  REQUIRE_FALSE(narrow.ops.empty());
  // The first op reads the step's inputs: their keys are the tensors' own.
  const OpRecord& first = narrow.ops.front();
  REQUIRE(first.inputs.size() == 2);
  CHECK(first.inputs[0].meta_key == input_meta_key(a));
  CHECK(first.inputs[0].meta_key != input_meta_key(wide_a));
  CHECK(input_meta_key(a) == input_meta_key(b));  // metadata alone, not the values
  CHECK(input_meta_key(a) != input_meta_key(a.to(torch::kDouble)));
  CHECK(input_meta_key(a) != input_meta_key(a.t()));
  CHECK(input_meta_key(a) != input_meta_key(at::Tensor()));
  int differ = 0;
  for (std::size_t i = 0; i < narrow.ops.size(); ++i) {
    const OpRecord& n = narrow.ops[i];
    const OpRecord& w = wide.ops[i];
    CAPTURE(i, n.name);
    REQUIRE(n.name == w.name);
    CHECK(n.args_key != 0);
    CHECK(n.args_key == w.args_key);  // the same arguments; only the tensors' sizes differ
    bool metas_differ = false;
    for (std::size_t k = 0; k < n.inputs.size(); ++k)
      metas_differ = metas_differ || n.inputs[k].meta_key != w.inputs[k].meta_key;
    CHECK((n.input_key != w.input_key) == metas_differ);
    differ += metas_differ ? 1 : 0;
  }
  CHECK(differ > 0);
  // Another argument changes the arguments' key.
  const HotTrace other = hot_trace_of(
      [&] {
        auto h = torch::gelu(a * b, "none");
        (void)h;
      },
      4, true);
  REQUIRE(other.ops.size() >= 2);
  CHECK(other.ops[1].args_key != narrow.ops[1].args_key);
  CHECK(other.ops[0].args_key == narrow.ops[0].args_key);
}

TEST_CASE("a damaged, foreign or unreadable trace file is refused, saying why", "[prepared]") {
  const HotTrace t = recorded_trace();
  const std::string good = *encode_trace(t);
  std::string why;

  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x5a;
  CHECK_FALSE(decode_trace(flipped, &why).has_value());
  CHECK(why.find("checksum") != std::string::npos);

  CHECK_FALSE(decode_trace(good.substr(0, good.size() - 3), &why).has_value());
  CHECK_FALSE(why.empty());

  CHECK_FALSE(decode_trace("hotpath-decision 1\nverdict compile\n", &why).has_value());
  CHECK(why.find("not a hotpath trace file") != std::string::npos);

  // Recorded with another LibTorch: its operators' arguments may differ.
  std::string other = good;
  const std::size_t at = other.find(TORCH_VERSION);
  REQUIRE(at != std::string::npos);
  other.replace(at, std::string(TORCH_VERSION).size(), std::string(TORCH_VERSION).size(), 'x');
  CHECK_FALSE(decode_trace(other, &why).has_value());
  CHECK(why.find("recorded with LibTorch") != std::string::npos);

  // On disk: saved, read back; changed on disk, refused; another signature's, refused.
  const hotpath_test::TempDir dir("hotpath-trace-file");
  REQUIRE(save_trace(dir.path(), t).empty());
  const std::optional<HotTrace> loaded = load_trace(dir.path(), t.signature, &why);
  REQUIRE(loaded.has_value());
  CHECK(plan_input_difference(t, *loaded).empty());
  const std::string path = trace_dir(dir.path()) + "/" + full_hex(t.signature) + ".trace";
  REQUIRE(read_all(path) == good);
  write_all(path, flipped);
  CHECK_FALSE(load_trace(dir.path(), t.signature, &why).has_value());
  CHECK(why.find(path) != std::string::npos);
  write_all(trace_dir(dir.path()) + "/" + full_hex(t.signature + 1) + ".trace", good);
  CHECK_FALSE(load_trace(dir.path(), t.signature + 1, &why).has_value());
  CHECK(why.find("another signature") != std::string::npos);
  CHECK_FALSE(load_trace(dir.path(), t.signature + 2, &why).has_value());
  CHECK(why.find("no file") != std::string::npos);

  // An argument of a kind the file does not hold: not kept.
  HotTrace odd = t;
  odd.ops[0].args.push_back(c10::ivalue::Tuple::create({c10::IValue(1), c10::IValue(2)}));
  CHECK_FALSE(encode_trace(odd, &why).has_value());
  CHECK(why.find("Tuple") != std::string::npos);
  CHECK_FALSE(save_trace(dir.path(), odd).empty());
}

TEST_CASE("a kept trace differs from the loop's wherever a plan built from it would",
          "[prepared]") {
  const HotTrace t = recorded_trace();
  {
    // A Scalar's value is a run-time parameter of every plan: the same plan.
    HotTrace u = t;
    auto [op, i] = scalar_argument(u);
    op->args[i] = op->args[i].isDouble() ? c10::IValue(op->args[i].toDouble() + 1.0)
                                         : c10::IValue(op->args[i].toInt() + 1);
    u.iteration += 7;
    CHECK(plan_input_difference(t, u).empty());
  }
  {
    // Its kind is not.
    HotTrace u = t;
    auto [op, i] = scalar_argument(u);
    op->args[i] = op->args[i].isDouble() ? c10::IValue(std::int64_t{1}) : c10::IValue(1.0);
    CHECK(plan_input_difference(t, u).find("differs") != std::string::npos);
  }
  {
    // A value the iteration still held at its end (a plan writes it; one built from the kept
    // trace would skip it).
    HotTrace u = t;
    OpRecord& op = op_with_output(u);
    op.output_alive[0] = !op.output_alive[0];
    const std::string diff = plan_input_difference(t, u);
    CHECK(diff.find(std::string(op.name)) != std::string::npos);
    // ... where the plan reads it: the op a group member; of any other op, not compared.
    const auto at = static_cast<std::size_t>(&op - u.ops.data());
    std::vector<bool> members(u.ops.size(), false);
    CHECK(plan_input_difference(t, u, &members).empty());
    members[at] = true;
    CHECK(plan_input_difference(t, u, &members) == diff);
  }
  {
    // A structural argument, a tensor's strides, the data flow, the op count.
    HotTrace u = t;
    for (OpRecord& op : u.ops)
      for (c10::IValue& a : op.args)
        if (a.isIntList()) a = c10::IValue(std::vector<std::int64_t>{0});
    CHECK_FALSE(plan_input_difference(t, u).empty());
    HotTrace v = t;
    v.ops.back().inputs.at(0).meta.strides.back() += 1;
    CHECK_FALSE(plan_input_difference(t, v).empty());
    HotTrace w = t;
    w.ops.back().inputs.at(0).ref.producer -= 1;
    CHECK_FALSE(plan_input_difference(t, w).empty());
    HotTrace x = t;
    x.ops.pop_back();
    CHECK(plan_input_difference(t, x).find("ops against") != std::string::npos);
  }
}

TEST_CASE("the known winners are the newest verdicts that say compile", "[prepared]") {
  const hotpath_test::TempDir dir("hotpath-winners");
  const DecisionStore store(dir.path());
  auto verdict = [&](std::uint64_t sig, bool compile, long seconds) {
    Decision d;
    d.compile = compile;
    d.reason = "test";
    store.save(sig, d);
    const std::string path = dir.path() + "/decisions/" + full_hex(sig) + ".txt";
    const struct timespec times[2] = {{seconds, 0}, {seconds, 0}};
    REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
  };
  verdict(0x11, true, 1000);
  verdict(0x22, false, 4000);  // a loser: never
  verdict(0x33, true, 3000);
  verdict(0x44, true, 2000);
  // Not a verdict: left out.
  write_all(dir.path() + "/decisions/notes.txt", "hotpath-decision 1\nverdict compile\n");
  write_all(dir.path() + "/decisions/00000000000000ab.txt", "garbage\n");
  const auto all = store.winners(10);
  REQUIRE(all.size() == 3);
  CHECK(all[0].first == 0x33);
  CHECK(all[1].first == 0x44);
  CHECK(all[2].first == 0x11);
  CHECK(all[0].second.compile);
  const auto two = store.winners(2);
  REQUIRE(two.size() == 2);
  CHECK(two[1].first == 0x44);
  CHECK(DecisionStore("").winners(4).empty());
  CHECK(DecisionStore(dir.path() + "/none").winners(4).empty());
}

TEST_CASE("a known winner's first iteration is the plan input its hot iteration was",
          "[prepared]") {
  // The trace a run keeps is its hot iteration's (the threshold's); a later run's known winner
  // turns hot at its first iteration, which the step detector closes only after later ones have
  // run: by then the optimizer's state, written in place, is a later op's output to the
  // recorder. The two must still be one plan's input, or no kept plan would ever be taken.
  auto run = [](bool first_sight) {
    torch::manual_seed(5);
    torch::nn::Sequential model(torch::nn::Linear(64, 256), torch::nn::GELU(),
                                torch::nn::Linear(256, 64));
    torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3));
    const auto x = torch::randn({32, 64}), y = torch::randn({32, 64});
    return hot_trace_of(
        [&] {
          opt.zero_grad();
          torch::mse_loss(model->forward(x), y).backward();
          opt.step();
        },
        8, false, first_sight);
  };
  const HotTrace at_hot = run(false), at_first_sight = run(true);
  CHECK(at_hot.iteration == 3);
  CHECK(at_first_sight.iteration == 1);
  CHECK(plan_input_difference(at_hot, at_first_sight).empty());
}
