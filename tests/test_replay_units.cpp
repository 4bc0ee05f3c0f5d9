// CUDA graph replay's pieces that need no GPU (exec/replay.h): which ops a capture refuses, how a
// stretch is cut into graphs, and how much a static copy holds. Whole loops replayed on the GPU
// are in test_replay.cpp.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "exec/replay.h"

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
