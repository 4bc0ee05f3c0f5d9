// The rms_norm row kernel follows the path ATen's CUDA kernel takes for its rows
// (aten/src/ATen/native/cuda/layer_norm_kernel.cu): a vectorized kernel that sums x^2 (rows of a
// multiple of 4 elements, aligned data) or a Welford kernel that takes rsqrt(var + mean^2 + eps).
// They differ where a row holds an infinity (rstd 0 against NaN), which fuzz_programs --layers
// found on the H200 (seeds 50000433 and 50000383: rstd 0 where eager had NaN).
#include "fusion_support.h"
#include "fuzz/cuda_rms_on_cpu.h"

using namespace fusion_test;

namespace {

using hotpath::detail::KernelArg;
using hotpath::detail::KernelSpec;
using hotpath::detail::TensorMeta;

// _fused_rms_norm(x, [cols], weight, 1e-6) over [64, cols] as CUDA records it, then a gelu of its
// result; after a gelu of x when `gelu_first` (then the norm's input is made in the group); x and
// weight of `dtype`.
struct RmsCase {
  std::int64_t cols = 256;
  bool gelu_first = false;
  c10::ScalarType dtype = c10::ScalarType::Float;
};

// The group's kernel and the alignment it asks of the norm's input and weight, read from memory
// (-1: not a kernel argument).
struct RmsKernel {
  KernelSpec spec;
  int x_align = -1, weight_align = -1;
};

RmsKernel rms_kernel(const RmsCase& c) {
  using namespace hotpath::detail;
  auto meta = [&](std::vector<std::int64_t> sizes) {
    TensorMeta m = cuda_meta(std::move(sizes));
    m.dtype = c.dtype;
    return m;
  };
  const TensorMeta x = meta({64, c.cols});
  HotTrace trace;
  if (c.gelu_first) {
    OpRecord gelu;
    gelu.name = "aten::gelu";
    gelu.inputs = {TensorInput{0, false, x, ValueRef{-1, 0}}};
    gelu.args = {c10::IValue(), c10::IValue(std::string("none"))};
    gelu.outputs = {meta({64, c.cols})};
    gelu.output_alias = {-1};
    gelu.output_alive = {false};
    trace.ops.push_back(gelu);
  }
  OpRecord norm;
  norm.name = "aten::_fused_rms_norm";
  norm.inputs = {TensorInput{0, false, c.gelu_first ? meta({64, c.cols}) : x,
                             ValueRef{c.gelu_first ? 0 : -1, 0}},
                 TensorInput{2, false, meta({c.cols}), ValueRef{-2, 0}}};
  norm.args = {c10::IValue(), c10::IValue(std::vector<std::int64_t>{c.cols}), c10::IValue(),
               c10::IValue(1e-6)};
  TensorMeta rstd = cuda_meta({64, 1});  // fp32 whatever the input's dtype, as ATen's
  norm.outputs = {meta({64, c.cols}), rstd};
  norm.output_alias = {-1, -1};
  norm.output_alive = {true, true};
  trace.ops.push_back(norm);
  OpRecord after;  // alone, the forward norm saves no launch: a gelu of its result joins it
  after.name = "aten::gelu";
  after.inputs = {TensorInput{0, false, meta({64, c.cols}),
                              ValueRef{static_cast<std::int64_t>(trace.ops.size()) - 1, 0}}};
  after.args = {c10::IValue(), c10::IValue(std::string("none"))};
  after.outputs = {meta({64, c.cols})};
  after.output_alias = {-1};
  after.output_alive = {true};
  trace.ops.push_back(after);
  const Graph g = Graph::from_trace(trace);
  const Partition part = partition_graph(g);
  INFO(part.to_text(g));
  REQUIRE(part.groups.size() == 1);
  RmsKernel k;
  k.spec = check_compiles(g, part.groups[0]);
  const int norm_member = c.gelu_first ? 1 : 0;
  for (const KernelArg& a : k.spec.args) {
    if (a.kind != KernelArg::Kind::Tensor || a.output >= 0) continue;
    if (a.member == norm_member && a.argument == 0) k.x_align = a.align_bytes;
    if (a.member == norm_member && a.argument == 2) k.weight_align = a.align_bytes;
    if (c.gelu_first && a.member == 0 && a.argument == 0) k.x_align = a.align_bytes;
  }
  return k;
}

bool welford(const KernelSpec& spec) { return spec.source.find("_mean") != std::string::npos; }

}  // namespace

TEST_CASE("rows of a multiple of 4 elements take ATen's vectorized path, if aligned",
          "[fusion][rows]") {
  // rsqrt(sum(x^2) / C + eps); the input and weight, read in place by ATen's kernel, must be
  // aligned to 4 elements at launch (16 bytes in fp32, 8 in fp16), else the group runs eagerly.
  for (const auto dtype : {c10::ScalarType::Float, c10::ScalarType::Half}) {
    CAPTURE(dtype);
    const RmsKernel k = rms_kernel(RmsCase{256, false, dtype});
    INFO(k.spec.source);
    CHECK_FALSE(welford(k.spec));
    CHECK(k.spec.source.find("_square = (") != std::string::npos);
    const int align = dtype == c10::ScalarType::Float ? 16 : 8;
    CHECK(k.x_align == align);
    CHECK(k.weight_align == align);
  }
  // An input recorded at an offset stays eager (the partition's rule for operands), but the
  // offset is not part of the signature: a later step's input at an odd offset meets the launch's
  // check instead (run eagerly, as ATen's Welford path would have).
}

TEST_CASE("an rms_norm input made in the group needs no alignment", "[fusion][rows]") {
  // Eager's input would be a tensor of its own (aligned); the gelu's input is no operand of the
  // norm's kernel path.
  const RmsKernel k = rms_kernel(RmsCase{256, true});
  INFO(k.spec.source);
  CHECK_FALSE(welford(k.spec));
  CHECK(k.x_align == 0);
  CHECK(k.weight_align == 16);
}

TEST_CASE("rows of other lengths take ATen's Welford path", "[fusion][rows]") {
  // rsqrt(var + mean^2 + eps) from the mean and the centred squares: an infinity in the row
  // makes the mean infinite and the centred values NaN, rstd NaN, as eager's; no alignment.
  for (const std::int64_t cols : {1, 10, 30, 258}) {
    CAPTURE(cols);
    const RmsKernel k = rms_kernel(RmsCase{cols});
    INFO(k.spec.source);
    CHECK(welford(k.spec));
    CHECK(k.spec.source.find("_mean * ") != std::string::npos);
    CHECK(k.x_align == 0);
    CHECK(k.weight_align == 0);
  }
}

TEST_CASE("the alignment ATen's rms_norm path asks of data it reads in place", "[fusion][rows]") {
  // One rule for the row kernel and for replay (an eager rms_norm captured in a graph).
  using hotpath::detail::rms_norm_vector_align;
  CHECK(rms_norm_vector_align(c10::ScalarType::Float, 8, true) == 16);
  CHECK(rms_norm_vector_align(c10::ScalarType::BFloat16, 4096, true) == 8);
  CHECK(rms_norm_vector_align(c10::ScalarType::Float, std::int64_t{1} << 24, true) == 16);
  CHECK(rms_norm_vector_align(c10::ScalarType::Float, (std::int64_t{1} << 24) + 4, true) == 0);
  CHECK(rms_norm_vector_align(c10::ScalarType::Float, 10, true) == 0);  // Welford anywhere
  CHECK(rms_norm_vector_align(c10::ScalarType::Float, 8, false) == 0);  // a contiguous copy
}

// Cause: a deferred op's output that autograd keeps only through another tensor on its storage
// (_fused_rms_norm's rstd, which it does not differentiate: it saves an alias for
// _fused_rms_norm_backward) lost its own tensor before the group ran; the group then wrote
// nothing there (held weakly: "nobody holds it") and the backward read memory nobody had
// written. Found by fuzz_programs --layers with stand-ins on the H200 (19 of 21 disagreements,
// seeds 10001710, 10002740, 70004832, ...), reproduced on the CPU with CUDA's op
// (fuzz/cuda_rms_on_cpu.h).
TEST_CASE("an output autograd keeps only through an alias of its storage is written",
          "[fusion][rows]") {
  fuzz::register_cuda_rms_on_cpu();
  for (const auto dtype : {torch::kFloat, torch::kHalf}) {
    CAPTURE(dtype);
    auto loop = [&](bool hot) {
      torch::manual_seed(7);
      auto x = torch::randn({6, 12}).to(dtype).requires_grad_(true);
      std::unique_ptr<Enabled> on;
      if (hot) on = std::make_unique<Enabled>(cpu_plans(2));
      std::vector<torch::Tensor> out;
      for (int i = 0; i < 8; ++i) {
        auto h = (x * 0.5).exp() * (1 + 0.1 * i);
        auto w = h.reshape({-1}).narrow(0, 0, 12) * 0.5 + 1;  // the weight, from h as well
        auto y = std::get<0>(at::_fused_rms_norm(h, {12}, w, 1e-6));
        auto loss = (y.to(torch::kFloat) * 0.3).sum() + h.to(torch::kFloat).sum() * 0.1;
        loss.backward();
        {
          torch::NoGradGuard ng;
          x -= 0.05 * x.grad();
          x.grad().zero_();
        }
        out.push_back(loss.detach().clone());
        hotpath::step();
      }
      on.reset();
      out.push_back(x.detach().clone());
      return out;
    };
    const auto plan = check_plan_is_eager(loop, 8);
    REQUIRE(plan != nullptr);
    const std::string text = plan->partition.to_text(*plan->graph);
    INFO(text);
    CHECK(text.find("_fused_rms_norm ") != std::string::npos);  // in a group: run deferred
  }
}
