// The benchmark suite: each workload eager and hotpath side by side in one process
// (bench_support.h's side_by_side: interleaved blocks of 10 after 4 that switch, eager under
// Pause), one row per workload in CSV and JSON: the times and their spread, peak memory, compile
// seconds, first fused and break-even iterations, and the governor's own judged speedup beside
// the measured one (how honest its report is on each workload). The sweeps op_bench and
// attention_memory add a row per configuration, each from a short side-by-side run of its own
// (suite_sweeps.h). GPU only.
//
//   bench_suite [--workloads matmul_chain,mlp_training,mixed_ops,attention_block,rope,
//                transformer_lm,op_bench,attention_memory]
//               [--iters N] [--block N] [--warmup N] [--sweep-iters N]
//               [--csv FILE] [--json FILE] [--cache DIR] [--list] [shape options, --help]
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "autocast_scope.h"
#include "bench_support.h"
#include "models/transformer_lm.h"
#include "suite_sweeps.h"

namespace {

using namespace bench;

struct Shapes {
  // matmul_chain: x[n, n]; `layers` x (h = relu(h @ W + b)); forward.
  std::int64_t chain_n = 2048;
  int chain_layers = 4;
  // mlp_training: Linear(dim, hidden), GELU, Linear(hidden, dim); batch; MSE; AdamW; full step.
  std::int64_t mlp_batch = 256, mlp_dim = 1024, mlp_hidden = 4096;
  // mixed_ops: x[batch, seq, dim]; layer_norm -> gelu(h) + h * sigmoid(h) -> h * 0.5 + x ->
  // cross-entropy over dim classes + mse; forward.
  std::int64_t mixed_batch = 32, mixed_seq = 512, mixed_dim = 768;
  // attention_block: x[batch, seq, dim]; pre-LayerNorm, QKV Linear, heads, softmax(QK^T/sqrt(d))V,
  // out Linear, residual; forward + backward.
  std::int64_t attn_batch = 8, attn_seq = 1024, attn_dim = 512, attn_heads = 8;
  // rope: rotary embedding of q[batch, seq, heads, head_dim] in bf16, interleaved pairs; forward.
  std::int64_t rope_batch = 8, rope_seq = 2048, rope_heads = 16, rope_head_dim = 128;
  // transformer_lm: the decoder-only LM of examples/models/transformer_lm.h (vocab 10000) at a
  // named size, batch x context tokens; mode forward, backward (forward + backward) or step
  // (AdamW(1e-4) as well); fp32 or bf16 autocast.
  std::string lm_size = "small", lm_mode = "step";
  std::int64_t lm_batch = 4, lm_context = 256;
  bool lm_bf16 = false;
};

// The LM sizes of the suite: width, layers, heads, feed-forward width.
const std::map<std::string, hotpath_examples::LmConfig> kLmSizes = {
    {"small", {10000, 768, 12, 12, 3072, 0}},  {"medium", {10000, 1024, 24, 16, 4096, 0}},
    {"large", {10000, 1280, 36, 20, 5120, 0}}, {"xl", {10000, 1600, 48, 25, 6400, 0}},
    {"2.7b", {10000, 2560, 32, 32, 10240, 0}},
};

using suite::Workload;

Workload matmul_chain(const Shapes& s) {
  const auto opt = torch::TensorOptions().device(torch::kCUDA);
  auto x = torch::randn({s.chain_n, s.chain_n}, opt);
  std::vector<torch::Tensor> w, b;
  for (int i = 0; i < s.chain_layers; ++i) {
    w.push_back(torch::randn({s.chain_n, s.chain_n}, opt) / std::sqrt(double(s.chain_n)));
    b.push_back(torch::randn({s.chain_n}, opt));
  }
  Workload wl;
  wl.sizes = "x[" + std::to_string(s.chain_n) + "," + std::to_string(s.chain_n) + "] x " +
             std::to_string(s.chain_layers) + " layers";
  wl.mode = "forward";
  wl.step = [x, w, b] {
    torch::NoGradGuard no_grad;
    auto h = x;
    for (std::size_t i = 0; i < w.size(); ++i) h = torch::relu(torch::matmul(h, w[i]) + b[i]);
  };
  return wl;
}

Workload mlp_training(const Shapes& s) {
  auto m = std::make_shared<Mlp>(s.mlp_batch, s.mlp_dim, s.mlp_hidden);
  Workload wl;
  wl.sizes = "batch " + std::to_string(s.mlp_batch) + ", " + std::to_string(s.mlp_dim) + "->" +
             std::to_string(s.mlp_hidden) + "->" + std::to_string(s.mlp_dim);
  wl.mode = "full AdamW step";
  wl.step = [m] { m->step(); };
  return wl;
}

Workload mixed_ops(const Shapes& s) {
  const auto opt = torch::TensorOptions().device(torch::kCUDA);
  auto x = torch::randn({s.mixed_batch, s.mixed_seq, s.mixed_dim}, opt);
  auto gamma = torch::randn({s.mixed_dim}, opt), beta = torch::randn({s.mixed_dim}, opt);
  auto labels = torch::randint(s.mixed_dim, {s.mixed_batch * s.mixed_seq}, opt.dtype(torch::kLong));
  auto target = torch::randn({s.mixed_batch, s.mixed_seq, s.mixed_dim}, opt);
  const std::int64_t dim = s.mixed_dim;
  Workload wl;
  wl.sizes = "x[" + std::to_string(s.mixed_batch) + "," + std::to_string(s.mixed_seq) + "," +
             std::to_string(s.mixed_dim) + "]";
  wl.mode = "forward";
  wl.step = [=] {
    torch::NoGradGuard no_grad;
    auto h = torch::layer_norm(x, {dim}, gamma, beta);
    h = torch::gelu(h) + h * torch::sigmoid(h);
    h = h * 0.5 + x;
    auto loss = torch::cross_entropy_loss(h.view({-1, dim}), labels) + torch::mse_loss(h, target);
    (void)loss;
  };
  return wl;
}

Workload attention_block(const Shapes& s) {
  struct Block {
    torch::nn::LayerNorm norm;
    torch::nn::Linear qkv, out;
    torch::Tensor x, grad;
    std::vector<torch::Tensor> params;
  };
  const std::int64_t d = s.attn_dim, heads = s.attn_heads, hd = d / heads;
  if (hd * heads != d) throw std::invalid_argument("--attn-dim must be a multiple of --attn-heads");
  auto b = std::make_shared<Block>(Block{torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})),
                                         torch::nn::Linear(d, 3 * d),
                                         torch::nn::Linear(d, d),
                                         torch::Tensor(),
                                         torch::Tensor(),
                                         {}});
  b->norm->to(torch::kCUDA);
  b->qkv->to(torch::kCUDA);
  b->out->to(torch::kCUDA);
  b->x = torch::randn({s.attn_batch, s.attn_seq, d}, torch::kCUDA);
  b->grad = torch::randn({s.attn_batch, s.attn_seq, d}, torch::kCUDA);
  for (const auto& list : {b->norm->parameters(), b->qkv->parameters(), b->out->parameters()})
    b->params.insert(b->params.end(), list.begin(), list.end());
  const std::int64_t batch = s.attn_batch, seq = s.attn_seq;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  Workload wl;
  wl.sizes = "x[" + std::to_string(batch) + "," + std::to_string(seq) + "," + std::to_string(d) +
             "], " + std::to_string(heads) + " heads";
  wl.mode = "forward + backward";
  wl.step = [=] {
    for (auto& p : b->params) p.mutable_grad() = torch::Tensor();
    auto qkv = b->qkv->forward(b->norm->forward(b->x)).view({batch, seq, 3, heads, hd});
    auto q = qkv.select(2, 0).transpose(1, 2), k = qkv.select(2, 1).transpose(1, 2),
         v = qkv.select(2, 2).transpose(1, 2);
    auto att = torch::softmax(torch::matmul(q, k.transpose(-2, -1)) * scale, -1);
    auto y = torch::matmul(att, v).transpose(1, 2).reshape({batch, seq, d});
    auto out = b->out->forward(y) + b->x;
    out.backward(b->grad);
  };
  return wl;
}

Workload rope(const Shapes& s) {
  const auto opt = torch::TensorOptions().device(torch::kCUDA);
  const std::int64_t half = s.rope_head_dim / 2;
  if (half * 2 != s.rope_head_dim) throw std::invalid_argument("--rope-head-dim must be even");
  auto q = torch::randn({s.rope_batch, s.rope_seq, s.rope_heads, s.rope_head_dim},
                        opt.dtype(torch::kBFloat16));
  auto pos = torch::arange(s.rope_seq, opt).unsqueeze(1);
  auto freq = torch::pow(10000.0, -torch::arange(half, opt) / static_cast<double>(half));
  auto angle = (pos * freq).view({1, s.rope_seq, 1, half});
  auto cos = torch::cos(angle).to(torch::kBFloat16), sin = torch::sin(angle).to(torch::kBFloat16);
  Workload wl;
  wl.sizes = "q[" + std::to_string(s.rope_batch) + "," + std::to_string(s.rope_seq) + "," +
             std::to_string(s.rope_heads) + "," + std::to_string(s.rope_head_dim) + "]";
  wl.dtype = "bf16";
  wl.mode = "forward";
  wl.step = [=] {
    torch::NoGradGuard no_grad;
    using torch::indexing::None;
    using torch::indexing::Slice;
    auto even = q.index({"...", Slice(0, None, 2)}), odd = q.index({"...", Slice(1, None, 2)});
    auto out = torch::stack({even * cos - odd * sin, even * sin + odd * cos}, -1).flatten(-2);
    (void)out;
  };
  return wl;
}

Workload transformer_lm(const Shapes& s) {
  struct Lm {
    hotpath_examples::LmConfig c;
    hotpath_examples::TransformerLm model;
    torch::optim::AdamW opt;
  };
  hotpath_examples::LmConfig c = kLmSizes.at(s.lm_size);
  c.context = s.lm_context;
  torch::manual_seed(0);
  hotpath_examples::TransformerLm model(c);
  model->to(torch::kCUDA);
  auto lm = std::make_shared<Lm>(
      Lm{c, model, torch::optim::AdamW(model->parameters(), torch::optim::AdamWOptions(1e-4))});
  const std::int64_t batch = s.lm_batch;
  const bool bf16 = s.lm_bf16, backward = s.lm_mode != "forward", step = s.lm_mode == "step";
  Workload wl;
  wl.sizes = s.lm_size + " (" + std::to_string(c.dim) + "/" + std::to_string(c.layers) + "/" +
             std::to_string(c.heads) + "/" + std::to_string(c.ff) + "), batch " +
             std::to_string(batch) + " x context " + std::to_string(c.context);
  wl.dtype = bf16 ? "bf16 autocast" : "fp32";
  wl.mode = step ? "full AdamW step" : backward ? "forward + backward" : "forward";
  wl.step = [=] {
    const auto opts = torch::TensorOptions(torch::kCUDA).dtype(torch::kLong);
    auto x = torch::randint(lm->c.vocab, {batch, lm->c.context}, opts);
    auto y = torch::randint(lm->c.vocab, {batch, lm->c.context}, opts);
    c10::AutoGradMode grad(backward);
    lm->opt.zero_grad();
    torch::Tensor loss;
    {
      hotpath_tools::Autocast on(bf16, c10::DeviceType::CUDA);
      auto logits = lm->model->forward(x);
      loss = torch::nn::functional::cross_entropy(logits.view({-1, lm->c.vocab}), y.view({-1}));
    }
    if (backward) loss.backward();
    if (step) lm->opt.step();
  };
  return wl;
}

const std::vector<std::pair<std::string, std::function<Workload(const Shapes&)>>> kWorkloads = {
    {"matmul_chain", matmul_chain},
    {"mlp_training", mlp_training},
    {"mixed_ops", mixed_ops},
    {"attention_block", attention_block},
    {"rope", rope},
    {"transformer_lm", transformer_lm},
};
const std::vector<
    std::pair<std::string, std::function<std::vector<suite::Make>(const suite::SweepShapes&)>>>
    kSweeps = {{"op_bench", suite::op_bench}, {"attention_memory", suite::attention_memory}};

double iqr(const std::vector<double>& v) { return quantile(v, 0.75) - quantile(v, 0.25); }

// The row of one workload: measured side by side, and what the governor said of the same run.
nlohmann::json measure(const std::string& name, const Workload& wl, int iters, int block,
                       int warmup, const std::string& cache, int kernels,
                       const std::string& trace_dir) {
  nlohmann::json row{
      {"workload", name}, {"sizes", wl.sizes}, {"dtype", wl.dtype}, {"mode", wl.mode}};
  auto c = config(cache, false);
  c.log_level = hotpath::LogLevel::Warn;
  // --kernels N: the top N kernels of one iteration a side from the CUDA profiler, eager and
  // hotpath as the governor left it (replayed, if it was).
  const auto profile = [&] {
    const KernelLists k = profile_both(
        3, wl.step,
        [&] {
          wl.step();
          hotpath::step();
        },
        trace_dir, name + "_");
    for (const auto* side : {&k.eager, &k.hot}) {
      std::vector<KernelLine> top(*side);
      if (top.size() > static_cast<std::size_t>(kernels)) top.resize(kernels);
      print_kernels(side == &k.eager ? "eager" : "hotpath", top);
    }
  };
  const SideBySide r = side_by_side(iters, warmup, wl.step, wl.step, c, block,
                                    kernels > 0 ? std::function<void()>(profile) : nullptr);
  const double e = median(r.eager), h = median(r.hot);
  row["eager_ms"] = e;
  row["hotpath_ms"] = h;
  row["eager_iqr_ms"] = iqr(r.eager);
  row["hotpath_iqr_ms"] = iqr(r.hot);
  row["speedup"] = h > 0 ? e / h : 0.0;
  row["eager_peak_mib"] = static_cast<double>(r.eager_peak_bytes) / (1 << 20);
  row["hotpath_peak_mib"] = static_cast<double>(r.hot_peak_bytes) / (1 << 20);
  row["fused_of_timed"] = r.fused_in;
  row["block"] = block;  // iterations per interleaved block (JSON only)
  // Every hotpath iteration from enable on (JSON only: the warm-up plot), and eager's blocks.
  std::vector<double> trace = r.lead;
  trace.insert(trace.end(), r.settling.begin(), r.settling.end());
  trace.insert(trace.end(), r.hot.begin(), r.hot.end());
  row["hotpath_trace_ms"] = trace;
  row["eager_trace_ms"] = r.eager;
  const auto top = busiest(r.stats);
  row["compile_s"] = top ? top->fusion.compile_ms / 1000 : 0.0;
  row["first_fused_iteration"] = top ? top->fusion.first_fused_iteration : -1;
  // CUDA graph replay of the busiest signature: iterations replayed, the pool its graphs reserved
  // (beside eager's peak), and why it is off where it is.
  row["replayed"] = top ? top->fusion.replayed_iterations : 0;
  row["replay_pool_mib"] =
      top ? static_cast<double>(top->fusion.replay_pool_bytes) / (1 << 20) : 0.0;
  row["replay_off"] = top ? top->fusion.replay_off : std::string();
  row["break_even_iteration"] = -1;
  row["governor_speedup"] = 0.0;
  row["governor_low"] = row["governor_high"] = 0.0;
  std::string verdict = "no hot signature";
  for (const auto& rep : r.report.signatures) {
    if (!top || rep.hex != top->hex) continue;
    row["break_even_iteration"] = rep.break_even_actual;
    row["governor_speedup"] = rep.speedup_judged;
    row["governor_low"] = rep.speedup_low;
    row["governor_high"] = rep.speedup_high;
    // The two sides of the governor's figure (JSON only): which one differs from the
    // measurement's says where a gap comes from.
    row["governor_eager_ms"] = rep.eager_median_ms;
    row["governor_fused_ms"] = rep.fused_median_ms;
    // How many rounds (a window and the eager iterations beside it) the figure pools (JSON only):
    // one round's interval says nothing of how far eager timed at another moment may fall.
    row["governor_rounds"] = rep.speedup_rounds;
    verdict = top->fusion.reverted      ? "reverted"
              : rep.speedup_judged <= 0 ? "no verdict yet"
              : rep.judged              ? "kept"
                                        : "kept, being re-checked";
  }
  const double judged = row["governor_speedup"];
  row["governor_vs_measured"] = judged > 0 && e > 0 && h > 0 ? judged / (e / h) - 1 : 0.0;
  row["status"] = "ok";
  row["governor"] = verdict;
  return row;
}

const char* const kColumns[] = {"workload",
                                "sizes",
                                "dtype",
                                "mode",
                                "eager_ms",
                                "hotpath_ms",
                                "eager_iqr_ms",
                                "hotpath_iqr_ms",
                                "speedup",
                                "eager_peak_mib",
                                "hotpath_peak_mib",
                                "compile_s",
                                "first_fused_iteration",
                                "break_even_iteration",
                                "fused_of_timed",
                                "replayed",
                                "replay_pool_mib",
                                "replay_off",
                                "governor",
                                "governor_speedup",
                                "governor_low",
                                "governor_high",
                                "governor_vs_measured",
                                "fused_groups",
                                "eager_gbps",
                                "hotpath_gbps",
                                "copy_gbps",
                                "eager_pct_copy",
                                "hotpath_pct_copy",
                                "theory_peak_mib",
                                "status"};

// "[#####.....] 12/40": where a run of many rows is.
std::string progress(std::size_t done, std::size_t total) {
  constexpr std::size_t kWidth = 20;
  const std::size_t filled = total ? done * kWidth / total : kWidth;
  return "[" + std::string(filled, '#') + std::string(kWidth - filled, '.') + "] " +
         std::to_string(done) + "/" + std::to_string(total);
}

// One line of what a row found.
void print_row(const nlohmann::json& row, double secs) {
  if (row["status"] != "ok") {
    std::printf("      %s: %s\n", row["sizes"].get<std::string>().c_str(),
                row["status"].get<std::string>().c_str());
    return;
  }
  std::printf("      %s: eager %.3f ms, hotpath %.3f ms: %.3fx measured",
              row["sizes"].get<std::string>().c_str(), row["eager_ms"].get<double>(),
              row["hotpath_ms"].get<double>(), row["speedup"].get<double>());
  if (row.contains("governor_speedup")) {
    const std::int64_t rounds =
        row.contains("governor_rounds") ? row["governor_rounds"].get<std::int64_t>() : 0;
    const std::string over =
        rounds > 0 ? " over " + std::to_string(rounds) + (rounds == 1 ? " round" : " rounds")
                   : std::string();
    std::printf("; the governor judged %.3fx (%.3f-%.3f%s, %s), %+.1f%%",
                row["governor_speedup"].get<double>(), row["governor_low"].get<double>(),
                row["governor_high"].get<double>(), over.c_str(),
                row["governor"].get<std::string>().c_str(),
                100 * row["governor_vs_measured"].get<double>());
  }
  if (row.contains("governor_eager_ms"))
    std::printf(" (its medians: eager %.3f ms, fused %.3f ms)",
                row["governor_eager_ms"].get<double>(), row["governor_fused_ms"].get<double>());
  if (row.contains("eager_pct_copy"))
    std::printf("; %.0f / %.0f GB/s (%.0f%% / %.0f%% of copy)", row["eager_gbps"].get<double>(),
                row["hotpath_gbps"].get<double>(), row["eager_pct_copy"].get<double>(),
                row["hotpath_pct_copy"].get<double>());
  std::printf("; peak %.0f / %.0f MiB", row["eager_peak_mib"].get<double>(),
              row["hotpath_peak_mib"].get<double>());
  if (row.contains("theory_peak_mib"))
    std::printf(" (accounting %.0f MiB)", row["theory_peak_mib"].get<double>());
  if (row.contains("replayed")) {
    if (row["replayed"].get<std::int64_t>() > 0)
      std::printf("; replayed %lld iterations (graph pool %.0f MiB)",
                  static_cast<long long>(row["replayed"].get<std::int64_t>()),
                  row["replay_pool_mib"].get<double>());
    else if (!row["replay_off"].get<std::string>().empty())
      std::printf("; not replayed: %s", row["replay_off"].get<std::string>().c_str());
    else
      std::printf("; not replayed");
  }
  std::printf("; %.1f s\n", secs);
}

std::string csv_field(const nlohmann::json& v) {
  if (v.is_null()) return "";
  if (!v.is_string()) return v.dump();
  std::string s = v.get<std::string>(), out = "\"";
  for (char ch : s) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return out + "\"";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hotpath's benchmark suite: eager and hotpath side by side, one row per workload"};
  std::string which =
                  "matmul_chain,mlp_training,mixed_ops,attention_block,rope,transformer_lm,"
                  "op_bench,attention_memory",
              csv_path, json_path;
  std::string cache = "/tmp/hotpath-suite-cache";
  int kernels = 0;
  std::string trace;
  int iters = 100, block = bench::kBlock, warmup = 10, sweep_iters = 20;
  bool list = false;
  Shapes s;
  suite::SweepShapes sw;
  app.add_option("--workloads", which, "comma-separated workloads (--list names them)");
  app.add_option("--iters", iters, "timed iterations a side")->check(CLI::Range(10, 100000));
  app.add_option("--block", block, "iterations per interleaved block (eager, then hotpath)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--warmup", warmup, "untimed iterations of both before")
      ->check(CLI::Range(0, 100000));
  app.add_option("--sweep-iters", sweep_iters, "timed iterations a side of a sweep's row")
      ->check(CLI::Range(5, 100000));
  app.add_option("--csv", csv_path, "write the rows as CSV here");
  app.add_option("--json", json_path, "write the rows as JSON here");
  app.add_option("--cache", cache, "hotpath's kernel cache directory");
  app.add_option("--kernels", kernels,
                 "print each workload's top N kernels per iteration, eager and hotpath (CUDA "
                 "profiler)")
      ->check(CLI::Range(0, 1000));
  app.add_option("--trace", trace,
                 "with --kernels: write the profiler's traces (Chrome format) to this directory, "
                 "<workload>_eager_trace.json and <workload>_hotpath_trace.json");
  app.add_flag("--list", list, "name the workloads and exit");
  app.add_option("--chain-n", s.chain_n, "matmul_chain: x is n x n")->check(CLI::Range(1, 65536));
  app.add_option("--chain-layers", s.chain_layers, "matmul_chain: layers")
      ->check(CLI::Range(1, 64));
  app.add_option("--mlp-batch", s.mlp_batch, "mlp_training: batch")->check(CLI::Range(1, 65536));
  app.add_option("--mlp-dim", s.mlp_dim, "mlp_training: input and output width")
      ->check(CLI::Range(1, 65536));
  app.add_option("--mlp-hidden", s.mlp_hidden, "mlp_training: hidden width")
      ->check(CLI::Range(1, 65536));
  app.add_option("--mixed-batch", s.mixed_batch, "mixed_ops: batch")->check(CLI::Range(1, 4096));
  app.add_option("--mixed-seq", s.mixed_seq, "mixed_ops: sequence")->check(CLI::Range(1, 65536));
  app.add_option("--mixed-dim", s.mixed_dim, "mixed_ops: width (and classes)")
      ->check(CLI::Range(2, 65536));
  app.add_option("--attn-batch", s.attn_batch, "attention_block: batch")
      ->check(CLI::Range(1, 4096));
  app.add_option("--attn-seq", s.attn_seq, "attention_block: sequence")
      ->check(CLI::Range(1, 65536));
  app.add_option("--attn-dim", s.attn_dim, "attention_block: model width")
      ->check(CLI::Range(1, 65536));
  app.add_option("--attn-heads", s.attn_heads, "attention_block: heads")
      ->check(CLI::Range(1, 1024));
  app.add_option("--rope-batch", s.rope_batch, "rope: batch")->check(CLI::Range(1, 4096));
  app.add_option("--rope-seq", s.rope_seq, "rope: sequence")->check(CLI::Range(1, 1 << 20));
  app.add_option("--rope-heads", s.rope_heads, "rope: heads")->check(CLI::Range(1, 1024));
  app.add_option("--rope-head-dim", s.rope_head_dim, "rope: head width (even)")
      ->check(CLI::Range(2, 4096));
  std::vector<std::string> sizes;
  for (const auto& [name, config] : kLmSizes) sizes.push_back(name);
  app.add_option("--lm-size", s.lm_size, "transformer_lm: size")->check(CLI::IsMember(sizes));
  app.add_option("--lm-mode", s.lm_mode, "transformer_lm: forward, backward (with forward), step")
      ->check(CLI::IsMember({"forward", "backward", "step"}));
  app.add_option("--lm-batch", s.lm_batch, "transformer_lm: batch")->check(CLI::Range(1, 4096));
  app.add_option("--lm-context", s.lm_context, "transformer_lm: context")
      ->check(CLI::Range(1, 65536));
  app.add_flag("--lm-bf16", s.lm_bf16, "transformer_lm: bf16 autocast");
  app.add_option("--op-bench-ops", sw.ops, "op_bench: ops")
      ->delimiter(',')
      ->check(CLI::IsMember(suite::op_bench_ops()));
  const auto positive = CLI::Range(std::int64_t{1}, std::int64_t{1} << 20);
  app.add_option("--op-bench-batch", sw.op_batch, "op_bench: batches")
      ->delimiter(',')
      ->check(positive);
  app.add_option("--op-bench-seq", sw.op_seq, "op_bench: sequences")
      ->delimiter(',')
      ->check(positive);
  app.add_option("--op-bench-dim", sw.op_dim, "op_bench: widths")->delimiter(',')->check(positive);
  app.add_option("--attn-mem-batch", sw.attn_batch, "attention_memory: batch")->check(positive);
  app.add_option("--attn-mem-dims", sw.attn_dims, "attention_memory: model widths")
      ->delimiter(',')
      ->check(positive);
  app.add_option("--attn-mem-seqs", sw.attn_seqs, "attention_memory: sequences")
      ->delimiter(',')
      ->check(positive);
  CLI11_PARSE(app, argc, argv);

  if (list) {
    for (const auto& [name, make] : kWorkloads) std::printf("%s\n", name.c_str());
    for (const auto& [name, make] : kSweeps) std::printf("%s (a sweep)\n", name.c_str());
    return 0;
  }
  // Every row to measure, in order: a workload's one, a sweep's many.
  std::vector<suite::Make> jobs;
  std::stringstream ss(which);
  for (std::string name; std::getline(ss, name, ',');) {
    const auto it = std::find_if(kWorkloads.begin(), kWorkloads.end(),
                                 [&](const auto& w) { return w.first == name; });
    const auto sweep = std::find_if(kSweeps.begin(), kSweeps.end(),
                                    [&](const auto& w) { return w.first == name; });
    if (it != kWorkloads.end()) {
      jobs.push_back([&s, name, make = it->second] {
        Workload wl = make(s);
        wl.name = name;
        return wl;
      });
    } else if (sweep != kSweeps.end()) {
      for (auto& job : sweep->second(sw)) jobs.push_back(std::move(job));
    } else {
      std::fprintf(stderr, "bench_suite: unknown workload '%s' (--list names them)\n",
                   name.c_str());
      return 2;
    }
  }
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "bench_suite: no CUDA device: the suite times GPU workloads only\n");
    return 2;
  }
  double copy = 0;  // GB/s, measured once the first op_bench row needs it
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    nlohmann::json row{{"status", "ok"}};
    std::string name = "?";
    try {
      const Workload wl = jobs[i]();
      name = wl.name;
      std::printf("%s %s %s ...\n", progress(i, jobs.size()).c_str(), wl.name.c_str(),
                  wl.sizes.c_str());
      std::fflush(stdout);
      row = wl.quick ? suite::quick_side_by_side(wl, sweep_iters, cache)
                     : measure(wl.name, wl, iters, block, warmup, cache, kernels, trace);
      if (wl.bytes > 0 && row["status"] == "ok") {
        if (copy == 0) copy = suite::copy_gbps();
        row["copy_gbps"] = copy;
        row["eager_pct_copy"] = 100 * row["eager_gbps"].get<double>() / copy;
        row["hotpath_pct_copy"] = 100 * row["hotpath_gbps"].get<double>() / copy;
      }
    } catch (const c10::OutOfMemoryError& e) {
      hotpath::disable_hot_path_detection();
      row["status"] = "out of memory";
    } catch (const std::exception& e) {
      hotpath::disable_hot_path_detection();
      row["status"] = std::string("error: ") + e.what();
    }
    if (!row.contains("workload")) row["workload"] = name;
    if (!row.contains("sizes")) row["sizes"] = "";
    c10::cuda::CUDACachingAllocator::emptyCache();
    print_row(row, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    rows.push_back(row);
  }
  if (!jobs.empty()) std::printf("%s done\n", progress(jobs.size(), jobs.size()).c_str());
  // attention_memory: the smallest configuration (by the accounting) that ran out of memory.
  const nlohmann::json* smallest = nullptr;
  for (const auto& row : rows) {
    if (row["workload"] != "attention_memory" || !row.contains("theory_peak_mib") ||
        row["status"].get<std::string>().rfind("out of memory", 0) != 0)
      continue;
    if (!smallest || row["theory_peak_mib"] < (*smallest)["theory_peak_mib"]) smallest = &row;
  }
  if (smallest)
    std::printf(
        "attention_memory: the smallest configuration out of memory: %s (%.0f MiB by the "
        "accounting)\n",
        (*smallest)["sizes"].get<std::string>().c_str(),
        (*smallest)["theory_peak_mib"].get<double>());
  if (!json_path.empty()) std::ofstream(json_path) << rows.dump(2) << "\n";
  if (!csv_path.empty()) {
    std::ofstream csv(csv_path);
    for (std::size_t k = 0; k < std::size(kColumns); ++k) csv << (k ? "," : "") << kColumns[k];
    csv << "\n";
    for (const auto& row : rows) {
      for (std::size_t k = 0; k < std::size(kColumns); ++k)
        csv << (k ? "," : "") << (row.contains(kColumns[k]) ? csv_field(row[kColumns[k]]) : "");
      csv << "\n";
    }
  }
  return 0;
}
