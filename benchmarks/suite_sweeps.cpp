// The suite's sweeps (suite_sweeps.h): op_bench and attention_memory, and the short side-by-side
// run that measures each of their rows.
#include "suite_sweeps.h"

#include "bench_support.h"

namespace suite {
namespace {

std::string dims(const std::vector<std::int64_t>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return "[" + s + "]";
}

constexpr double kFloat = 4;  // bytes of an fp32 element

// One op_bench row: `op` over x[batch, seq, dim] (fp32, forward).
Workload op_row(const std::string& op, std::int64_t batch, std::int64_t seq, std::int64_t dim) {
  const auto opt = torch::TensorOptions().device(torch::kCUDA);
  const double n = static_cast<double>(batch * seq), elems = n * static_cast<double>(dim);
  auto x = torch::randn({batch, seq, dim}, opt);
  Workload wl;
  wl.name = "op_bench";
  wl.sizes = op + " x" + dims({batch, seq, dim});
  wl.mode = "forward";
  wl.quick = true;
  if (op == "layer_norm") {
    auto w = torch::randn({dim}, opt), b = torch::randn({dim}, opt);
    // x in, y out, the weight and bias, a mean and a reciprocal deviation per row.
    wl.bytes = kFloat * (2 * elems + 2 * static_cast<double>(dim) + 2 * n);
    wl.step = [=] {
      torch::NoGradGuard no_grad;
      (void)torch::layer_norm(x, {dim}, w, b);
    };
  } else if (op == "gelu") {
    wl.bytes = kFloat * 2 * elems;
    wl.step = [=] {
      torch::NoGradGuard no_grad;
      (void)torch::gelu(x);
    };
  } else if (op == "swish") {
    wl.sizes = "swish (x * sigmoid(x)) x" + dims({batch, seq, dim});
    wl.bytes = kFloat * 2 * elems;
    wl.step = [=] {
      torch::NoGradGuard no_grad;
      (void)(x * torch::sigmoid(x));
    };
  } else if (op == "mse") {
    auto y = torch::randn({batch, seq, dim}, opt);
    wl.bytes = kFloat * (2 * elems + 1);
    wl.step = [=] {
      torch::NoGradGuard no_grad;
      (void)torch::mse_loss(x, y);
    };
  } else if (op == "cross_entropy") {
    // Rows of `dim` class scores, an int64 target per row.
    auto labels = torch::randint(dim, {batch * seq}, opt.dtype(torch::kLong));
    wl.bytes = kFloat * (elems + 1) + 8 * n;
    wl.step = [=] {
      torch::NoGradGuard no_grad;
      (void)torch::cross_entropy_loss(x.view({-1, dim}), labels);
    };
  } else {
    throw std::invalid_argument("op_bench: unknown op '" + op + "'");
  }
  return wl;
}

}  // namespace

const std::vector<std::string>& op_bench_ops() {
  static const std::vector<std::string> ops = {"layer_norm", "gelu", "swish", "mse",
                                               "cross_entropy"};
  return ops;
}

std::vector<Make> op_bench(const SweepShapes& s) {
  std::vector<Make> rows;
  for (const std::string& op : s.ops)
    for (const std::int64_t b : s.op_batch)
      for (const std::int64_t t : s.op_seq)
        for (const std::int64_t d : s.op_dim) rows.push_back([=] { return op_row(op, b, t, d); });
  return rows;
}

std::vector<Make> attention_memory(const SweepShapes& s) {
  std::vector<Make> rows;
  for (const std::int64_t d : s.attn_dims) {
    for (const std::int64_t t : s.attn_seqs) {
      const std::int64_t b = s.attn_batch;
      rows.push_back([=] {
        const auto opt = torch::TensorOptions().device(torch::kCUDA);
        auto q = torch::randn({b, t, d}, opt).requires_grad_(true);
        auto k = torch::randn({b, t, d}, opt).requires_grad_(true);
        auto v = torch::randn({b, t, d}, opt).requires_grad_(true);
        auto g = torch::randn({b, t, d}, opt);
        const double scale = 1.0 / std::sqrt(static_cast<double>(d));
        Workload wl;
        wl.name = "attention_memory";
        wl.sizes = "q,k,v" + dims({b, t, d});
        wl.mode = "forward + backward";
        wl.quick = true;
        // A lower bound: three [b, t, t] tensors alive at once (forward: the scores, the scaled
        // scores and the probabilities, all temporaries of one expression; backward: the
        // probabilities, their gradient and the scores'), beside q, k, v, their gradients, the
        // output and its gradient. Eager measured four on the H100 (2026-11-25).
        const double tt = static_cast<double>(b) * static_cast<double>(t) * static_cast<double>(t);
        wl.theory_bytes = kFloat * (3 * tt + 8 * static_cast<double>(b * t * d));
        wl.step = [=]() mutable {
          for (auto* p : {&q, &k, &v}) p->mutable_grad() = torch::Tensor();
          auto p = torch::softmax(torch::matmul(q, k.transpose(1, 2)) * scale, -1);
          torch::matmul(p, v).backward(g);
        };
        return wl;
      });
    }
  }
  return rows;
}

double copy_gbps() {
  const std::int64_t n = (std::int64_t{512} << 20) / 4;
  auto src = torch::randn({n}, torch::kCUDA), dst = torch::empty({n}, torch::kCUDA);
  bench::time_iterations(3, [&](int) { dst.copy_(src); });
  const double ms = bench::median(bench::time_iterations(20, [&](int) { dst.copy_(src); }));
  return 2.0 * static_cast<double>(n) * kFloat / (ms * 1e6);
}

nlohmann::json quick_side_by_side(const Workload& wl, int iters, const std::string& cache) {
  nlohmann::json row{
      {"workload", wl.name}, {"sizes", wl.sizes}, {"dtype", wl.dtype}, {"mode", wl.mode}};
  constexpr int kQuickBlock = 5;
  std::vector<double> eager, hot;
  std::int64_t eager_peak = 0, hot_peak = 0;
  using bench::append;
  using bench::peak_of;
  const char* side = "eager";
  hotpath::Stats stats;
  try {
    // Eager's peak before hotpath holds anything (its buffers for a plan's temporaries stay
    // allocated while the eager blocks run under Pause).
    peak_of(eager_peak, [&] { bench::time_iterations(2, [&](int) { wl.step(); }); });
    auto c = bench::config(cache, false);
    c.threshold = 3;
    c.log_level = hotpath::LogLevel::Warn;
    side = "hotpath";
    hotpath::enable_hot_path_detection(c);
    for (int i = 0; i < 6; ++i) {
      wl.step();
      hotpath::step();
      if (i == 3) hotpath::wait_for_compilation();
    }
    for (int done = 0; done < iters; done += kQuickBlock) {
      side = "eager";
      {
        hotpath::Pause pause;
        append(eager, bench::time_iterations(kQuickBlock, [&](int) { wl.step(); }));
      }
      side = "hotpath";
      peak_of(hot_peak, [&] {
        append(hot, bench::time_iterations(kQuickBlock, [&](int) {
                 wl.step();
                 hotpath::step();
               }));
      });
    }
    stats = hotpath::stats();
    hotpath::disable_hot_path_detection();
  } catch (const c10::OutOfMemoryError&) {
    hotpath::disable_hot_path_detection();
    row["status"] = std::string("out of memory (") + side + ")";
    if (wl.theory_bytes > 0) row["theory_peak_mib"] = wl.theory_bytes / (1 << 20);
    return row;
  }
  const double e = bench::median(eager), h = bench::median(hot);
  auto iqr = [](const std::vector<double>& v) {
    return bench::quantile(v, 0.75) - bench::quantile(v, 0.25);
  };
  row["eager_ms"] = e;
  row["hotpath_ms"] = h;
  row["eager_iqr_ms"] = iqr(eager);
  row["hotpath_iqr_ms"] = iqr(hot);
  row["speedup"] = h > 0 ? e / h : 0.0;
  row["eager_peak_mib"] = static_cast<double>(eager_peak) / (1 << 20);
  row["hotpath_peak_mib"] = static_cast<double>(hot_peak) / (1 << 20);
  const auto top = bench::busiest(stats);
  row["compile_s"] = top ? top->fusion.compile_ms / 1000 : 0.0;
  row["first_fused_iteration"] = top ? top->fusion.first_fused_iteration : -1;
  row["fused_groups"] = top ? static_cast<std::int64_t>(top->fusion.groups.size()) : 0;
  row["governor"] = "not judged (a sweep's short run)";
  if (wl.bytes > 0) {
    row["eager_gbps"] = e > 0 ? wl.bytes / (e * 1e6) : 0.0;
    row["hotpath_gbps"] = h > 0 ? wl.bytes / (h * 1e6) : 0.0;
  }
  if (wl.theory_bytes > 0) row["theory_peak_mib"] = wl.theory_bytes / (1 << 20);
  row["status"] = "ok";
  return row;
}

}  // namespace suite
