// A training loop that all-reduces its gradients through a c10d process group (gloo, a world of
// one, on the CPU): the collective is an op of the hot iteration's signature, hotpath's plan runs
// it where the loop does, the result is eager's bit for bit, and hotpath keeps no reference to
// the process group (a record holding it would keep its threads, and NCCL's communicators, alive
// past the program's own shutdown).
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <catch2/catch.hpp>

#include <algorithm>

#include "ddp_support.h"
#include "hotpath/hotpath.h"

namespace {

c10::intrusive_ptr<c10d::ProcessGroup> world_of_one() {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto opts = c10d::ProcessGroupGloo::Options::create();
  opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store, 0, 1, opts);
  auto pg = c10::make_intrusive<c10d::ProcessGroup>(store, 0, 1);
  pg->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, gloo);
  pg->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
  return pg;
}

torch::nn::Sequential seeded_mlp() {
  torch::manual_seed(3);
  return torch::nn::Sequential(torch::nn::Linear(32, 64), torch::nn::GELU(),
                               torch::nn::Linear(64, 32));
}

struct DataParallelMlp {
  torch::nn::Sequential model = seeded_mlp();
  torch::optim::AdamW opt{model->parameters(), torch::optim::AdamWOptions(1e-3)};
  torch::Tensor x = torch::randn({16, 32}), y = torch::randn({16, 32});
  // The example's bucketed all-reduce (examples/ddp_support.h): here one bucket, one collective.
  hotpath_examples::GradBuckets buckets{model->parameters(), std::int64_t{1} << 30};
  void step(c10d::ProcessGroup& pg) {
    opt.zero_grad();
    torch::mse_loss(model->forward(x), y).backward();
    buckets.allreduce(pg);
    opt.step();
  }
  torch::Tensor flat_parameters() { return hotpath_examples::flat_parameters(model->parameters()); }
};

}  // namespace

TEST_CASE("a collective is an op of the hot iteration, run where the loop puts it", "[ddp]") {
  auto pg = world_of_one();
  DataParallelMlp eager, hot;
  for (int i = 0; i < 30; ++i) eager.step(*pg);

  const auto refs = pg.use_count();
  hotpath::Config c;
  c.threshold = 3;
  c.fuse_cpu = true;  // CPU plans: groups run by ATen, exactly as eager
  c.stand_aside = false;
  c.remember = false;
  c.log_level = hotpath::LogLevel::Warn;
  hotpath::disable_hot_path_detection();
  hotpath::enable_hot_path_detection(c);
  for (int i = 0; i < 30; ++i) hot.step(*pg);
  const hotpath::Stats s = hotpath::stats();
  INFO(hotpath::format_stats(s));
  CHECK(pg.use_count() == refs);  // no record, plan or deferred op holds the process group
  hotpath::disable_hot_path_detection();

  REQUIRE(s.hot_signatures() == 1);
  const auto sig =
      std::find_if(s.signatures.begin(), s.signatures.end(), [](const auto& x) { return x.hot; });
  CHECK(std::count(sig->op_names.begin(), sig->op_names.end(), "c10d::allreduce_") == 1);
  CHECK_FALSE(sig->fusion.groups.empty());
  CHECK(sig->fusion.fused_iterations > 20);
  CHECK(sig->fusion.divergences == 0);
  CHECK(torch::equal(hot.flat_parameters(), eager.flat_parameters()));
}
