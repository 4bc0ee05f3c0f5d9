// bench_fusion's cases: row reductions (softmax, norms, losses) and the verification runs.
#include "bench_support.h"

namespace bench {

// rows: softmax / log_softmax / mean / sum over the last dimension, fwd + bwd
void bench_rows(const Options& o) {
  const int iters = o.iters;
  const std::string& cache = o.cache;
  std::ofstream& out = *o.out;
  // One line per workload ("<label>: eager .. ms, hotpath steady .. ms, speedup ..x; host p50"),
  // its groups, and two CSV rows under `key`.
  auto report = [&](const std::string& label, const std::string& key, const SideBySide& r) {
    const double eager_ms = median(r.eager);
    const double fused_ms = median(r.hot);
    std::printf(
        "%s: eager %.3f ms, hotpath steady %.3f ms, speedup %.2fx; host p50: eager %.3f ms, "
        "hotpath %.3f ms\n",
        label.c_str(), eager_ms, fused_ms, eager_ms / fused_ms, median(r.eager_host),
        median(r.hot_host));
    if (const auto s = busiest(r.stats)) print_groups(*s);
    if (out) {
      out << key << ",eager," << eager_ms << ",,1\n";
      out << key << ",hotpath," << fused_ms << ",," << eager_ms / fused_ms << "\n";
    }
  };
  // 8192 rows: the loop is bound by the host (dispatch of ~40 ops); 65536 rows: by the GPU.
  for (const std::int64_t rows : {8192, 65536}) {
    torch::manual_seed(3);
    Rows eager(torch::kFloat, rows), hot(torch::kFloat, rows);
    report("rows (softmax, log_softmax, mean, sum over " + std::to_string(rows) +
               "x512 fp32, fwd+bwd)",
           "rows" + std::to_string(rows),
           side_by_side(
               iters, 10, [&] { eager.step(); }, [&] { hot.step(); }, config(cache, false)));
  }
  {
    // A bias gradient over many rows (a transformer's B*T): column kernels in chunks of rows.
    torch::manual_seed(8);
    const auto o = torch::TensorOptions(torch::kCUDA);
    auto x = torch::randn({16384, 1024}, o), b = torch::randn({1024}, o);
    auto body = [&] { auto s = torch::gelu(x * 0.5 + b).sum(0); };
    report("tall column sum (gelu(x * 0.5 + b).sum(0), 16384x1024 fp32)", "tall_column_sum",
           side_by_side(iters, 10, body, body, config(cache, false)));
  }
  for (const std::int64_t batch : {2, 16}) {
    torch::manual_seed(9);
    MaskedSoftmax eager(torch::kFloat, batch), hot(torch::kFloat, batch);
    report("masked softmax (" + std::to_string(batch) +
               "x8x256x256 fp32, causal mask [256, 256], fwd+bwd)",
           "masked_softmax" + std::to_string(batch),
           side_by_side(
               iters, 10, [&] { eager.step(); }, [&] { hot.step(); }, config(cache, false)));
  }
  for (const std::int64_t rows : {8192, 65536}) {
    torch::manual_seed(6);
    CrossEntropy eager(torch::kFloat, rows), hot(torch::kFloat, rows);
    report("cross_entropy (" + std::to_string(rows) + "x1000 fp32 logits, mean, fwd+bwd)",
           "cross_entropy" + std::to_string(rows),
           side_by_side(
               iters, 10, [&] { eager.step(); }, [&] { hot.step(); }, config(cache, false)));
  }
  for (const std::int64_t rows : {8192, 65536})
    for (const bool layer : {false, true}) {
      torch::manual_seed(4);
      Norm eager(torch::kFloat, rows, layer), hot(torch::kFloat, rows, layer);
      const std::string what = layer ? "layer_norm" : "rms_norm";
      report(what + " (weight, gelu, " + std::to_string(rows) + "x512 fp32, fwd+bwd)",
             what + std::to_string(rows),
             side_by_side(
                 iters, 10, [&] { eager.step(); }, [&] { hot.step(); }, config(cache, false)));
    }
}

// verification: every fused group against eager, fresh random inputs each launch, on the
// groups' own kernels and on the interpreter
void bench_verify(const Options& o) {
  const std::string& cache = o.cache;
  for (const bool kernels : {true, false}) {
    const char* tier = kernels ? "compiled kernels" : "interpreter";
    torch::manual_seed(2);
    Mlp mlp;
    hotpath::enable_hot_path_detection(config(cache, true, kernels));
    for (int i = 0; i < 30; ++i) {
      mlp.x.normal_();
      mlp.y.normal_();
      mlp.step();
      hotpath::step();
      if (i == 10) hotpath::wait_for_compilation();
    }
    std::printf("verify mlp+adamw (fp32, %s):\n", tier);
    if (const auto s = busiest(hotpath::stats())) print_groups(*s);
    hotpath::disable_hot_path_detection();

    if (kernels) {  // row kernels have no interpreter form
      // 30 steps on fresh random inputs, every launch checked against eager.
      auto verify = [&](const char* what, torch::Dtype dtype, const std::function<void()>& fresh,
                        const std::function<void()>& step) {
        hotpath::enable_hot_path_detection(config(cache, true, kernels));
        for (int i = 0; i < 30; ++i) {
          fresh();
          step();
          hotpath::step();
          if (i == 10) hotpath::wait_for_compilation();
        }
        std::printf("verify %s (%s, %s):\n", what, dtype == torch::kFloat ? "fp32" : "bf16", tier);
        if (const auto s = busiest(hotpath::stats())) print_groups(*s);
        hotpath::disable_hot_path_detection();
      };
      for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
        Rows rows(dtype);
        verify(
            "rows: softmax, log_softmax, mean, sum, fwd+bwd", dtype,
            [&] {
              rows.x.detach().normal_();
              rows.g.normal_();
            },
            [&] { rows.step(); });
        {
          // Sums over the first dimension (column kernels), 1000 columns: the last tile of 32 is
          // partly empty.
          const auto o = torch::TensorOptions(torch::kCUDA).dtype(dtype);
          auto x = torch::randn({256, 1000}, o), b = torch::randn({1000}, o);
          verify(
              "column sums: gelu(x * 0.5 + b).sum(0), (g * g).sum(0, keepdim)", dtype,
              [&] {
                x.normal_();
                b.normal_();
              },
              [&] {
                auto g = torch::gelu(x * 0.5 + b);
                auto s = g.sum(0);
                auto k = (g * g).sum(0, true);
              });
        }
        {
          // Taller than a column kernel's block walks: 16384 rows in chunks, a bias-gradient-like
          // sum with a pointwise chain before it.
          const auto o = torch::TensorOptions(torch::kCUDA).dtype(dtype);
          auto x = torch::randn({16384, 1000}, o), b = torch::randn({1000}, o);
          verify(
              "tall column sums: gelu(x * 0.5 + b).sum(0) over 16384 rows", dtype,
              [&] {
                x.normal_();
                b.normal_();
              },
              [&] { auto s = torch::gelu(x * 0.5 + b).sum(0); });
        }
        {
          // mse_loss reduced to one value (total kernels), mean and sum, 1M elements.
          const auto o = torch::TensorOptions(torch::kCUDA).dtype(dtype);
          auto x = torch::randn({1024, 1024}, o), t = torch::randn({1024, 1024}, o);
          verify(
              "mse_loss to one value: mean(x * 0.5, t), sum(x, t)", dtype,
              [&] {
                x.normal_();
                t.normal_();
              },
              [&] {
                auto m = torch::mse_loss(x * 0.5, t);
                auto s = torch::mse_loss(x, t, at::Reduction::Sum);
              });
        }
        {
          MaskedSoftmax ms(dtype, 2);
          verify(
              "masked softmax (causal mask over batch and heads), fwd+bwd", dtype,
              [&] {
                ms.x.detach().normal_();
                ms.g.normal_();
              },
              [&] { ms.step(); });
        }
        for (const auto reduction : {torch::Reduction::Mean, torch::Reduction::Sum}) {
          CrossEntropy ce(dtype, 8192, reduction);
          verify(
              reduction == torch::Reduction::Mean ? "cross_entropy (mean), fwd+bwd"
                                                  : "cross_entropy (sum), fwd+bwd",
              dtype,
              [&] {
                ce.z.detach().normal_();
                ce.fresh_targets();
              },
              [&] { ce.step(); });
        }
        {
          // Rows longer than 1024: a block per row, forward and backward.
          CrossEntropy ce(dtype, 1024, torch::Reduction::Mean, 5000);
          verify(
              "cross_entropy (mean, 5000 classes), fwd+bwd", dtype,
              [&] {
                ce.z.detach().normal_();
                ce.fresh_targets();
              },
              [&] { ce.step(); });
        }
        for (const bool layer : {true, false}) {
          Norm wide(dtype, 1024, layer, 2000);
          verify(
              layer ? "layer_norm -> gelu -> mul over 2000 columns, fwd+bwd"
                    : "rms_norm -> gelu -> mul over 2000 columns, fwd+bwd",
              dtype,
              [&] {
                wide.x.detach().normal_();
                wide.g.normal_();
              },
              [&] { wide.step(); });
        }
        for (const bool layer : {true, false}) {
          Norm norm(dtype, 8192, layer);
          verify(
              layer ? "layer_norm -> gelu -> mul, fwd+bwd" : "rms_norm -> gelu -> mul, fwd+bwd",
              dtype,
              [&] {
                norm.x.detach().normal_();
                norm.g.normal_();
              },
              [&] { norm.step(); });
        }
      }
    }

    if (kernels) {
      // Two in-place chains on a tensor and a view of it: one kernel, batched by the plan; the
      // executor must see the shared storage and launch them in order. Against the same loop
      // run eagerly on a copy.
      torch::manual_seed(7);
      auto x = torch::randn({1024, 1024}, torch::kCUDA);
      auto x_eager = x.clone();
      auto v = x.view({-1}), v_eager = x_eager.view({-1});  // made outside: no op between
      auto loop = [](torch::Tensor& a, torch::Tensor& view) {
        a.mul_(0.5).add_(1.0);
        view.mul_(0.25).add_(2.0);
      };
      hotpath::enable_hot_path_detection(config(cache, false, kernels));
      for (int i = 0; i < 30; ++i) {
        loop(x, v);
        hotpath::step();
        if (i == 10) hotpath::wait_for_compilation();
      }
      const auto st = hotpath::stats();
      hotpath::disable_hot_path_detection();
      for (int i = 0; i < 30; ++i) loop(x_eager, v_eager);
      const double err = ((x - x_eager).norm() / x_eager.norm()).item<double>();
      std::printf("verify views of one tensor updated in turn (fp32, %s): rel err %.3g\n", tier,
                  err);
      if (const auto s = busiest(st)) print_groups(*s);
    }
    for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
      auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(dtype);
      auto ln = torch::nn::LayerNorm(torch::nn::LayerNormOptions({1024}));
      ln->to(torch::kCUDA, dtype);
      auto x = torch::randn({512, 1024}, opts);
      hotpath::enable_hot_path_detection(config(cache, true, kernels));
      {
        torch::NoGradGuard ng;
        for (int i = 0; i < 30; ++i) {
          x.normal_();
          auto y = torch::gelu(ln->forward(x)) + x;
          hotpath::step();
          if (i == 10) hotpath::wait_for_compilation();
        }
      }
      std::printf("verify layernorm->gelu->residual (%s, %s):\n",
                  dtype == torch::kFloat ? "fp32" : "bf16", tier);
      if (const auto s = busiest(hotpath::stats())) print_groups(*s);
      hotpath::disable_hot_path_detection();
    }
  }
}

}  // namespace bench
