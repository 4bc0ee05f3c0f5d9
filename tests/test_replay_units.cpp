// CUDA graph replay's pieces (exec/replay.h): which ops a capture refuses, how a stretch is cut
// into graphs, and how much a static copy holds (no GPU needed); the fingerprint kernel a capture
// checks read-only inputs with (on a GPU). Whole loops replayed on the GPU are in test_replay.cpp.
#include <c10/cuda/CUDAStream.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "codegen/interpreter.h"
#include "driver/cuda_driver.h"
#include "exec/replay.h"
#include "have_gpu.h"
#include "hotpath/hotpath.h"

namespace {

// The MLP+AdamW step after its loss.item(), each op's fused group (-1: eager): ones_like,
// mse_loss_backward (group 0), the backward's products, two column sums (groups 1, 2), then
// AdamW's four updates of nine ops each (groups 3-6, one batch in the plan).
std::vector<int> mlp_backward_and_adamw() {
  std::vector<int> ops = {-1, 0, -1, -1, -1, -1, 1, -1, -1, -1, -1, 2};
  for (int g = 3; g <= 6; ++g) ops.insert(ops.end(), 9, g);
  return ops;
}

}  // namespace

TEST_CASE("which ops draw random numbers (each starts a graph of its own)", "[replay]") {
  auto& d = c10::Dispatcher::singleton();
  auto random = [&](const char* name, const char* overload) {
    return hotpath::detail::draws_random(d.findSchemaOrThrow(name, overload).schema(), name);
  };
  CHECK(random("aten::randn", ""));  // no generator argument in this overload
  CHECK(random("aten::native_dropout", ""));
  CHECK(random("aten::bernoulli_", "float"));
  CHECK(random("aten::normal_", ""));
  CHECK(random("aten::randint", "low"));
  CHECK_FALSE(random("aten::addmm", ""));
  CHECK_FALSE(random("aten::native_layer_norm", ""));
  CHECK_FALSE(random("aten::mul_", "Tensor"));
}

TEST_CASE("which ops change a tensor's sizes in place (run as views, or not captured)",
          "[replay]") {
  // A graph would leave such an op's tensor with the sizes it had: the ops that read no data run
  // as they are (changes_view); resize_ may copy data, and the capture refuses it (resizes).
  auto& d = c10::Dispatcher::singleton();
  auto view = [&](const char* name, const char* overload) {
    return hotpath::detail::changes_view(d.findSchemaOrThrow(name, overload), name);
  };
  CHECK(view("aten::t_", ""));
  CHECK(view("aten::transpose_", ""));
  CHECK(view("aten::squeeze_", ""));
  CHECK(view("aten::unsqueeze_", ""));
  CHECK(view("aten::as_strided_", ""));
  CHECK(view("aten::detach_", ""));
  CHECK(view("aten::set_", "source_Tensor"));
  CHECK(view("aten::set_data", ""));
  CHECK_FALSE(view("aten::resize_", ""));
  CHECK_FALSE(view("aten::add_", "Tensor"));
  CHECK_FALSE(view("aten::copy_", ""));
  CHECK_FALSE(view("aten::zero_", ""));
  CHECK(hotpath::detail::resizes("aten::resize_"));
  CHECK(hotpath::detail::resizes("aten::resize_as_"));
  CHECK_FALSE(hotpath::detail::resizes("aten::t_"));
  CHECK_FALSE(hotpath::detail::resizes("aten::add_"));
}

TEST_CASE("a stretch's first graphs are smaller, then each takes replay_graph_ops ops",
          "[replay]") {
  using hotpath::detail::graph_size;
  CHECK(graph_size(16, 0) == 4);
  CHECK(graph_size(16, 1) == 8);
  CHECK(graph_size(16, 2) == 16);
  CHECK(graph_size(16, 7) == 16);
  CHECK(graph_size(2, 0) == 1);  // never an empty graph
  CHECK(graph_size(1, 0) == 1);
  CHECK(graph_size(1, 3) == 1);
}

TEST_CASE("a static copy spans a view's memory from its first element to its last", "[replay]") {
  using hotpath::detail::span_bytes;
  const auto base = torch::zeros({4, 32, 65});
  CHECK(span_bytes(base) == 4 * 32 * 65 * 4);
  CHECK(span_bytes(base[1].slice(1, 0, 64)) == (31 * 65 + 64) * 4);     // rows with gaps
  CHECK(span_bytes(torch::zeros({1, 64}).expand({32, 64})) == 64 * 4);  // repeats
  CHECK(span_bytes(base.transpose(0, 2)) == 4 * 32 * 65 * 4);
  CHECK(span_bytes(torch::zeros({0, 3})) == 0);
  CHECK(hotpath::detail::data_address(torch::Tensor()) == nullptr);
  CHECK(hotpath::detail::data_address(base[1]) ==
        static_cast<const char*>(base.const_data_ptr()) + 32 * 65 * 4);
}

TEST_CASE("a captured stretch is cut before a run of ops no graph may end inside", "[replay]") {
  using hotpath::detail::cut_before;
  using hotpath::detail::uncut_runs;
  const std::vector<int> ops = mlp_backward_and_adamw();
  const std::vector<std::uint32_t> runs = uncut_runs(ops);
  REQUIRE(runs.size() == ops.size());
  const std::size_t adamw = ops.size() - 36;
  // Eager ops and groups of one: a graph may end after each.
  for (std::size_t i = 0; i < adamw; ++i) CHECK(runs[i] == 1);
  // An update: from its first op to its last no graph may end (a batch's groups count one by
  // one: the capture launches the complete ones where it cuts).
  CHECK(runs[adamw] == 9);
  CHECK(runs[adamw + 4] == 5);
  CHECK(runs[adamw + 9] == 9);
  CHECK(runs.back() == 1);

  // A graph of three ops ends before the update when the next graph would take 8...
  CHECK(cut_before(3, 8, runs[adamw], true));
  // ... not before a short run, nor inside a pending group, nor as a graph's first op.
  CHECK_FALSE(cut_before(3, 8, runs[adamw - 1], true));
  CHECK_FALSE(cut_before(3, 8, runs[adamw + 9], false));
  CHECK_FALSE(cut_before(0, 8, runs[adamw], true));
  // The open graph's size alone still cuts, as before: two updates, then the next two.
  CHECK(cut_before(18, 16, runs[adamw + 18], true));
  CHECK_FALSE(cut_before(9, 16, runs[adamw + 9], true));

  // Groups that interleave: no cut until both have launched.
  CHECK(uncut_runs({0, 1, 0, 1, -1, -1}) == std::vector<std::uint32_t>{4, 3, 2, 1, 1, 1});
  // A group whose members come apart with eager ops between them spans those too.
  CHECK(uncut_runs({-1, 0, -1, -1, 0, -1}) == std::vector<std::uint32_t>{1, 4, 3, 2, 1, 1});
  CHECK(uncut_runs({}).empty());
}

TEST_CASE("a tensor's elements as bytes, whatever its layout", "[replay]") {
  using hotpath::detail::element_bytes;
  // The bytes of the elements in logical order, as a contiguous copy's are.
  auto same_bytes = [](const torch::Tensor& t) {
    const torch::Tensor b = element_bytes(t);
    CHECK(b.dim() == 1);
    CHECK(b.stride(0) == 1);
    CHECK(b.scalar_type() == torch::kByte);
    return torch::equal(b, t.clone(at::MemoryFormat::Contiguous).reshape({-1}).view(torch::kByte));
  };
  auto base = torch::randn({2});
  // One element with stride 2 (a slice with a step): contiguous() keeps it as it is, and viewing
  // it as bytes throws (a capture once threw that into the loop: fuzz seed 50000813).
  const auto one = base.slice(0, 0, 2, 2);
  REQUIRE(one.numel() == 1);
  REQUIRE(one.stride(0) == 2);
  CHECK_THROWS(one.contiguous().reshape({-1}).view(torch::kByte));
  CHECK(same_bytes(one));
  CHECK(same_bytes(torch::randn({3, 1}).expand({3, 1}).as_strided({1, 1}, {5, 7})));
  CHECK(same_bytes(torch::randn({4, 6}).t()));                // transposed
  CHECK(same_bytes(torch::randn({4, 6}).slice(1, 0, 6, 2)));  // a step in the last dim
  CHECK(same_bytes(torch::randn({5, 3}, torch::kHalf)));      // contiguous: a view
  CHECK(same_bytes(torch::randn({2, 3}).expand({4, 2, 3})));  // broadcast
  const auto dense = torch::randn({5, 3});
  CHECK(element_bytes(dense).data_ptr() == dense.data_ptr());  // no copy where none is needed
}

namespace {

// runtime/fingerprint.cuh's sum, on the host.
unsigned long long host_fingerprint(const std::vector<std::uint8_t>& bytes, std::size_t first,
                                    std::size_t n) {
  unsigned long long sum = 0;
  for (std::size_t w = 0; w * 8 < n; ++w) {
    unsigned long long v = 0;
    for (std::size_t b = 0; b < 8 && w * 8 + b < n; ++b)
      v |= static_cast<unsigned long long>(bytes[first + w * 8 + b]) << (8 * b);
    unsigned long long x = v ^ (w * 0x9e3779b97f4a7c15ULL);
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    sum += x;
  }
  return sum;
}

}  // namespace

TEST_CASE("the fingerprint kernel: the host's sum of the bytes, and another where one changed",
          "[gpu][replay]") {
  if (!hotpath_test::have_gpu()) return;
  using namespace hotpath::detail;
  // Loaded with the interpreter's module, on the side worker that enabling starts.
  hotpath::enable_hot_path_detection(10);
  std::shared_ptr<const CudaModule> kernel;
  for (int i = 0; i < 1000 && !(kernel = fingerprint_kernel(0)); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  hotpath::disable_hot_path_detection();
  REQUIRE(kernel != nullptr);
  std::mt19937 gen(7);
  std::vector<std::uint8_t> host(static_cast<std::size_t>((1 << 20) + 13));
  for (auto& b : host) b = static_cast<std::uint8_t>(gen());
  const auto device =
      torch::from_blob(host.data(), {static_cast<std::int64_t>(host.size())}, torch::kUInt8)
          .to(torch::kCUDA);
  auto print = [&](const torch::Tensor& bytes, std::size_t first, std::size_t n) {
    // A slot that holds something else first: the caller clears it (as keep_bytes does).
    auto out = torch::full({1}, 12345, torch::dtype(torch::kLong).device(torch::kCUDA));
    out.zero_();
    const auto* data = bytes.data_ptr<std::uint8_t>() + first;
    auto len = static_cast<unsigned long long>(n);
    auto* slot = reinterpret_cast<unsigned long long*>(out.data_ptr<std::int64_t>());
    void* params[] = {&data, &len, &slot};
    const auto words = static_cast<unsigned>((n + 7) / 8);
    const unsigned blocks =
        std::max(1U, std::min(1024U, (words + kFingerprintBlock - 1) /
                                         static_cast<unsigned>(kFingerprintBlock)));
    kernel->launch(blocks, kFingerprintBlock, c10::cuda::getCurrentCUDAStream().stream(), params);
    return static_cast<unsigned long long>(out.item<std::int64_t>());
  };
  // Any start (byte loads), any length (a tail of fewer than 8 bytes), a grid-stride loop.
  for (const auto& [first, n] :
       std::vector<std::pair<std::size_t, std::size_t>>{{0, host.size()},
                                                        {3, host.size() - 3},
                                                        {8, 4096},
                                                        {1, 7},
                                                        {5, 1},
                                                        {0, std::size_t{1} << 20}}) {
    CAPTURE(first, n);
    CHECK(print(device, first, n) == host_fingerprint(host, first, n));
  }
  const unsigned long long whole = print(device, 0, host.size());
  CHECK(print(device, 0, host.size()) == whole);  // the same bytes, the same sum
  for (const std::size_t at : {std::size_t{0}, host.size() / 2 + 1, host.size() - 1}) {
    CAPTURE(at);
    auto changed = device.clone();
    changed[static_cast<std::int64_t>(at)].add_(1);
    CHECK(print(changed, 0, host.size()) != whole);
  }
  // Two words swapped: each word is mixed with its place.
  auto swapped = device.clone();
  swapped.slice(0, 0, 8).copy_(device.slice(0, 8, 16));
  swapped.slice(0, 8, 16).copy_(device.slice(0, 0, 8));
  CHECK(print(swapped, 0, host.size()) != whole);
}
