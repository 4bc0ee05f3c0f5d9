// From source to kernel without a GPU: NVRTC compiles every generated kernel and the interpreter,
// the kernel cache and the kernel builder, the interpreter's programs.
#include <future>
#include <random>

#include "codegen/interpreter.h"
#include "compile/worker.h"
#include "fusion_support.h"

using namespace fusion_test;

TEST_CASE("every generated kernel compiles with NVRTC", "[fusion][nvrtc]") {
  const auto plan = op_zoo_plan();
  REQUIRE(plan != nullptr);
  REQUIRE(plan->partition.groups.size() >= 2);
  const auto& g = *plan->graph;
  std::set<std::string> ops;
  int compiled = 0;
  for (const auto& grp : plan->partition.groups) {
    for (int n : grp.nodes) ops.insert(g.node(n).short_name());
    const auto spec = hotpath::detail::generate_kernel(g, grp);
    INFO(spec.source);
    const auto out = hotpath::detail::nvrtc_compile(spec.source, spec.name, 90,
                                                    hotpath::detail::runtime_headers(), "");
    CHECK(out.cubin.size() > 0);
    ++compiled;
  }
  INFO(plan->partition.to_text(g));
  CHECK(compiled >= 2);
  for (const char* op :
       {"gelu", "gelu_backward", "silu", "silu_backward", "sigmoid_backward", "softplus_backward",
        "addcmul", "where.self", "lerp.Scalar", "_to_copy", "mul.Tensor", "add.Tensor"}) {
    CAPTURE(op);
    CHECK(ops.count(op) == 1);
  }
}

TEST_CASE("the interpreter kernel holds every op form and compiles with NVRTC", "[fusion][nvrtc]") {
  const std::string& src = hotpath::detail::interpreter_source();
  const auto& forms = hotpath::detail::op_forms();
  REQUIRE(forms.size() > 40);
  for (std::size_t i = 0; i < forms.size(); ++i) {
    CAPTURE(forms[i].key, forms[i].variant);
    CHECK(src.find("case " + std::to_string(i) + ":  // " + forms[i].key) != std::string::npos);
  }
  const auto out = hotpath::detail::nvrtc_compile(src, hotpath::detail::kInterpreterFunction, 90,
                                                  hotpath::detail::runtime_headers(), "");
  CHECK(out.cubin.size() > 0);
  // Its module carries replay's fingerprint kernel (runtime/fingerprint.cuh) too.
  const std::string cubin(out.cubin.begin(), out.cubin.end());
  CHECK(cubin.find(hotpath::detail::kFingerprintFunction) != std::string::npos);
}

TEST_CASE("the build compiled the interpreter kernel into the prebuilt kernel directory",
          "[fusion][cache]") {
  using namespace hotpath::detail;
  REQUIRE_FALSE(prebuilt_kernel_dirs().empty());
  const std::string key = kernel_cache_key(interpreter_source(), 90);
  INFO("prebuilt: " << prebuilt_kernel_dirs().front() << "/" << key << ".cubin");
  // Found with no cache directory of its own: from the build tree's kernels.
  const auto cubin = KernelCache("").load(key);
  REQUIRE(cubin.has_value());
  CHECK(cubin->size() > 1000);
  // A user's cache directory does not hide it.
  hotpath_test::TempDir dir("hotpath-prebuilt-test");
  CHECK(KernelCache(dir.path()).load(key).has_value());
}

// The MLP+AdamW plan's update kernels (one a parameter), as its GPU form generates them: alone,
// or (`multi`) with the entry that launches the batch of them at once.
static std::vector<hotpath::detail::KernelSpec> adamw_update_kernels(bool multi) {
  const auto plan = mlp_plan(6);
  REQUIRE(plan != nullptr);
  std::vector<hotpath::detail::KernelSpec> specs;
  for (const auto& group : plan->partition.groups) {
    auto spec = hotpath::detail::generate_kernel(*plan->graph, group, multi);
    if (spec.name.find("addcdiv") != std::string::npos) specs.push_back(std::move(spec));
  }
  return specs;
}

TEST_CASE("the build compiled AdamW's update kernel into the prebuilt kernel directory",
          "[fusion][cache]") {
  // A cold start of the MLP+AdamW step compiles the model's own kernels only: the optimizer's
  // update, as this plan's GPU form generates it (alone and with the batch's entry), is found
  // with no cache directory of its own.
  using namespace hotpath::detail;
  int found = 0;
  for (bool multi : {false, true}) {
    for (const KernelSpec& spec : adamw_update_kernels(multi)) {
      const std::string key = kernel_cache_key(spec.source, 90);
      INFO(spec.name << (multi ? " with the multi entry" : "") << ": " << key);
      CHECK(KernelCache("").load(key).has_value());
      ++found;
    }
  }
  CHECK(found == 8);  // four parameters, each alone and in the batch
}

TEST_CASE("fusion groups become interpreter programs", "[fusion]") {
  SECTION("the optimizer groups of an MLP + AdamW step") {
    const auto plan = mlp_plan(5);
    REQUIRE(plan != nullptr);
    REQUIRE(plan->groups.size() >= 4);
    int optimizer_groups = 0;
    for (std::size_t k = 0; k < plan->partition.groups.size(); ++k) {
      const auto& spec = plan->groups[k].spec;
      INFO(plan->groups[k].name << ": " << spec.not_interpretable);
      if (plan->partition.groups[k].columns()) {  // the bias gradients: column kernels only
        CHECK(spec.not_interpretable == "a sum over columns");
        continue;
      }
      if (plan->partition.groups[k].total()) {  // the loss: a total kernel only
        CHECK(spec.not_interpretable == "a reduction to one value");
        CHECK(spec.fixed_blocks >= 1);
        continue;
      }
      if (plan->groups[k].name == "mse_loss_backward") {
        REQUIRE(spec.interpretable());
        check_program(*plan->graph, plan->partition.groups[k], spec);
        continue;
      }
      ++optimizer_groups;
      REQUIRE(spec.interpretable());
      check_program(*plan->graph, plan->partition.groups[k], spec);
      // AdamW: param, exp_avg, exp_avg_sq read with the gradient; those three and two values
      // nobody but hotpath may hold written.
      CHECK(spec.program.loads == 4);
      CHECK(spec.program.stores == 5);
      // Its values in a few registers of the interpreter's file (one each: 4 + code).
      CHECK(spec.program.regs <= 6);
      CHECK(spec.program.code + spec.program.loads > 12);
    }
    CHECK(optimizer_groups == 4);
  }
  SECTION("the op zoo: gelu variants, clamp bounds, bf16 rounding; broadcasts are not") {
    const auto plan = op_zoo_plan();
    REQUIRE(plan != nullptr);
    const auto& g = *plan->graph;
    int interpretable = 0, broadcast = 0;
    bool rounds_bf16 = false;
    for (const auto& grp : plan->partition.groups) {
      const auto spec = hotpath::detail::generate_kernel(g, grp);
      if (!spec.interpretable()) {
        CHECK(spec.not_interpretable == "a strided or broadcast operand");
        ++broadcast;
        continue;
      }
      ++interpretable;
      check_program(g, grp, spec);
      for (int k = 0; k < spec.program.code; ++k)
        rounds_bf16 = rounds_bf16 || spec.program.instr[k].round == hp::kBF16;
    }
    CHECK(interpretable >= 2);
    CHECK(broadcast >= 1);  // x * w + row, xt.t()
    CHECK(rounds_bf16);
  }
  SECTION("an operand of another dtype is cast to the op's dtype first, as eager casts it") {
    using hotpath::detail::operand_rounding;
    torch::manual_seed(6);
    auto a = torch::randn({4, 8}).to(torch::kBFloat16);
    auto h = torch::randn({}).to(torch::kHalf);  // zero-dim: the bf16 tensor decides
    auto f = torch::randn({});
    auto w = torch::randn({4, 8});
    std::shared_ptr<const hotpath::detail::Plan> plan;
    {
      Enabled on(cpu_plans(2));
      for (int i = 0; i < 3; ++i) {
        auto y = (a * h + f).sigmoid();
        y.add_(w, 0.5);  // in place into bf16, computed in fp32: w is not rounded
        hotpath::step();
      }
      plan = last_plan();
    }
    REQUIRE(plan != nullptr);
    const auto& g = *plan->graph;
    REQUIRE(plan->partition.groups.size() == 1);
    const auto& grp = plan->partition.groups[0];
    std::map<std::string, std::vector<c10::ScalarType>> rounding;
    for (int n : grp.nodes) {
      const auto& node = g.node(n);
      rounding[node.short_name()] =
          operand_rounding(g, node, *hotpath::detail::find_pointwise(node));
    }
    using c10::ScalarType;
    CHECK(rounding["mul.Tensor"] ==
          std::vector<ScalarType>{ScalarType::Float, ScalarType::BFloat16});
    CHECK(rounding["add.Tensor"] ==
          std::vector<ScalarType>{ScalarType::Float, ScalarType::BFloat16});
    CHECK(rounding["sigmoid"] == std::vector<ScalarType>{ScalarType::Float});
    CHECK(rounding["add_.Tensor"] == std::vector<ScalarType>{ScalarType::Float, ScalarType::Float});
    const auto spec = hotpath::detail::generate_kernel(g, grp);
    INFO(spec.source);
    REQUIRE(spec.interpretable());
    check_program(g, grp, spec);
    CHECK(spec.program.code == static_cast<int>(grp.nodes.size()) + 2);  // h and f cast
    std::size_t casts = 0;
    for (std::size_t at = 0;
         (at = spec.source.find("hp::round_to<hp::bfloat16>(x", at)) != std::string::npos; ++at)
      ++casts;
    CHECK(casts == 2);
  }
}

namespace {

// What a program computes, by symbolic execution: per store, the expression of the value it
// stores, e.g. "f3(L0,f5(L1))" (form 3 of load 0 and of form 5 of load 1); and per instruction,
// the expressions it reads. Two programs that differ only in their registers give the same.
std::vector<std::string> program_meaning(const hp::Program& p) {
  std::vector<std::string> reg(256, "?"), out;
  for (int k = 0; k < p.loads; ++k) reg[p.load_reg[k]] = "L" + std::to_string(p.load_slot[k]);
  for (int k = 0; k < p.code; ++k) {
    const hp::ProgramInstr& in = p.instr[k];
    const auto n = hotpath::detail::op_forms()[static_cast<std::size_t>(in.op)].op->tensors.size();
    const unsigned char operands[] = {in.a, in.b, in.c};
    std::string e = "f" + std::to_string(in.op) + "(";
    for (std::size_t i = 0; i < n; ++i) e += (i ? "," : "") + reg[operands[i]];
    e += ")";
    out.push_back("instr " + std::to_string(k) + " " + e);
    reg[in.dst] = e;
  }
  for (int k = 0; k < p.stores; ++k)
    out.push_back("store " + std::to_string(p.store_slot[k]) + " " + reg[p.store_reg[k]]);
  return out;
}

}  // namespace

TEST_CASE("the interpreter's registers are reused once their values are read for the last time",
          "[fusion][interpreter]") {
  using hotpath::detail::allocate_registers;
  using hotpath::detail::op_forms;
  // A form of each operand count.
  std::map<std::size_t, short> form;
  for (std::size_t i = 0; i < op_forms().size(); ++i)
    form.emplace(op_forms()[i].op->tensors.size(), static_cast<short>(i));
  REQUIRE(form.count(1));
  REQUIRE(form.count(2));
  REQUIRE(form.count(3));
  SECTION("a chain needs two registers, whatever its length") {
    hp::Program p{};
    p.loads = 1;
    p.load_slot[0] = 0;
    p.load_reg[0] = 0;
    p.code = 40;
    for (int k = 0; k < p.code; ++k) {
      p.instr[k].op = form[1];
      p.instr[k].a = static_cast<unsigned char>(k);
      p.instr[k].dst = static_cast<unsigned char>(k + 1);
    }
    p.stores = 1;
    p.store_slot[0] = 1;
    p.store_reg[0] = 40;
    const auto before = program_meaning(p);
    CHECK(allocate_registers(p) == 1);  // each instruction writes the register it reads
    CHECK(p.regs == 1);
    CHECK(program_meaning(p) == before);
  }
  SECTION("random programs mean what they meant, in fewer registers") {
    std::mt19937 rng(7);
    int fewer = 0;
    for (int trial = 0; trial < 2000; ++trial) {
      hp::Program p{};
      std::uniform_int_distribution<int> loads(1, 6), code(1, 40), arity(1, 3);
      p.loads = loads(rng);
      p.code = code(rng);
      int values = 0;
      // Values are numbered as the builder numbers them: loads interleaved with results.
      std::vector<int> defined;
      for (int k = 0; k < p.loads; ++k) {
        p.load_slot[k] = static_cast<unsigned char>(k);
        p.load_reg[k] = static_cast<unsigned char>(values);
        defined.push_back(values++);
      }
      for (int k = 0; k < p.code; ++k) {
        hp::ProgramInstr& in = p.instr[k];
        const int n = arity(rng);
        in.op = form[static_cast<std::size_t>(n)];
        unsigned char* operands[] = {&in.a, &in.b, &in.c};
        std::uniform_int_distribution<std::size_t> pick(0, defined.size() - 1);
        for (int i = 0; i < n; ++i) *operands[i] = static_cast<unsigned char>(defined[pick(rng)]);
        in.dst = static_cast<unsigned char>(values);
        defined.push_back(values++);
      }
      std::uniform_int_distribution<int> stores(1, 5);
      p.stores = std::min<int>(stores(rng), static_cast<int>(defined.size()));
      std::vector<int> order = defined;
      std::shuffle(order.begin(), order.end(), rng);
      for (int k = 0; k < p.stores; ++k) {
        p.store_slot[k] = static_cast<unsigned char>(10 + k);
        p.store_reg[k] = static_cast<unsigned char>(order[static_cast<std::size_t>(k)]);
      }
      const auto before = program_meaning(p);
      const int regs = allocate_registers(p);
      INFO("trial " << trial);
      CHECK(program_meaning(p) == before);
      CHECK(regs <= values);
      CHECK(regs >= std::min(p.loads, 1));
      fewer += regs < values ? 1 : 0;
    }
    CHECK(fewer > 1500);
  }
  SECTION("a program that reads a value before it is written is refused") {
    hp::Program p{};
    p.loads = 1;
    p.load_reg[0] = 0;
    p.code = 1;
    p.instr[0].op = form[2];
    p.instr[0].a = 0;
    p.instr[0].b = 5;  // never written
    p.instr[0].dst = 1;
    p.stores = 1;
    p.store_reg[0] = 1;
    CHECK_THROWS_WITH(allocate_registers(p), Catch::Contains("reads value 5 before it is written"));
  }
}

TEST_CASE("the kernel cache: miss, hit, corrupt entry", "[fusion][cache]") {
  const hotpath_test::TempDir tmp("hotpath-cache-test");
  const std::string dir = tmp.path() + "/nested";
  hotpath::detail::KernelCache cache(dir);
  const std::string key = hotpath::detail::kernel_cache_key("source", 90);
  CHECK(key != hotpath::detail::kernel_cache_key("source", 80));
  CHECK(key != hotpath::detail::kernel_cache_key("source2", 90));
  CHECK_FALSE(cache.load(key).has_value());
  cache.store(key, std::string("\x7f"
                               "ELF cubin bytes",
                               16));
  REQUIRE(cache.load(key).has_value());
  CHECK(*cache.load(key) == std::string("\x7f"
                                        "ELF cubin bytes",
                                        16));
  {
    std::fstream f(cache.path(key), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f << "XYZ";  // damage the payload
  }
  CHECK_FALSE(cache.load(key).has_value());
  cache.store(key, "recompiled");
  CHECK(cache.load(key).value() == "recompiled");
}

TEST_CASE("a plan's kernels build in one NVRTC program, a broken one alone, cached by kernel",
          "[fusion][nvrtc]") {
  using namespace hotpath::detail;
  const hotpath_test::TempDir tmp("hotpath-builder-test");
  const KernelCache cache(tmp.path());
  // Each with a helper of the same name and the runtime header, as generated kernels have.
  auto job = [](const std::string& name, const std::string& body) {
    const std::string source =
        "#include \"hotpath_runtime.cuh\"\n"
        "__device__ float f(float v) { " +
        body +
        " }\n"
        "extern \"C\" __global__ void " +
        name + "(float* x) { x[threadIdx.x] = f(x[threadIdx.x]); }\n";
    return KernelJob{source, name, kernel_cache_key(source, 90)};
  };
  SECTION("together: one program, one cubin with every kernel, stored once") {
    const std::vector<KernelJob> jobs = {job("k_double", "return v * 2.0f;"),
                                         job("k_half", "return v * 0.5f;"),
                                         job("k_sqrt", "return sqrtf(v);")};
    {
      KernelBuilder b(jobs, 90, runtime_headers(), cache);
      CHECK(b.compiled() == 3);
      for (std::size_t k = 0; k < jobs.size(); ++k) {
        CAPTURE(k);
        CHECK(b.wait(k).error.empty());
        CHECK_FALSE(b.wait(k).from_cache);
        CHECK(b.wait(k).program_kernels == 3);
        CHECK(b.wait(k).cubin == b.wait(0).cubin);
      }
      CHECK(b.programs() == 1);
      CHECK(b.wait(0).cubin.size() > 100);
    }
    // Each kernel's entry names the program's, which holds the cubin.
    const auto program = KernelCache::referenced(cache.load_entry(jobs[0].key).value());
    REQUIRE(program.has_value());
    for (const KernelJob& j : jobs)
      CHECK(KernelCache::referenced(cache.load_entry(j.key).value()) == program);
    CHECK_FALSE(KernelCache::referenced(cache.load_entry(*program).value()).has_value());
    std::string image;
    CHECK(cache.load(jobs[2].key, &image) == cache.load_entry(*program));
    CHECK(image == *program);
    {
      KernelBuilder again(jobs, 90, runtime_headers(), cache);
      CHECK(again.compiled() == 0);
      CHECK(again.programs() == 0);
      for (std::size_t k = 0; k < jobs.size(); ++k) {
        CHECK(again.wait(k).from_cache);
        CHECK(again.wait(k).image == *program);  // one image to load for the three
      }
      const BuiltKernel one = load_or_compile(jobs[1], 90, runtime_headers(), cache);
      CHECK(one.from_cache);
      CHECK(one.cubin == again.wait(1).cubin);
    }
    // The program's cubin damaged: its kernels are misses and compile again.
    std::ofstream(cache.path(*program), std::ios::binary | std::ios::trunc) << "XYZ";
    KernelBuilder third(jobs, 90, runtime_headers(), cache);
    CHECK(third.compiled() == 3);
    CHECK(third.wait(0).error.empty());
    CHECK(cache.load(jobs[0].key).has_value());
  }
  SECTION("a broken kernel fails alone; the others build anyway") {
    const std::vector<KernelJob> jobs = {job("k_double", "return v * 2.0f;"),
                                         job("k_broken", "return undeclared;"),
                                         job("k_half", "return v * 0.5f;")};
    {
      KernelBuilder b(jobs, 90, runtime_headers(), cache);
      CHECK(b.wait(1).error.find("undeclared") != std::string::npos);
      CHECK(b.wait(1).error.find("hotpath_unit") == std::string::npos);  // its own log
      for (std::size_t k : {0, 2}) {
        CAPTURE(k);
        CHECK(b.wait(k).error.empty());
        CHECK(b.wait(k).program_kernels == 1);
      }
      CHECK(b.programs() == 4);  // the program, then each kernel alone
    }
    KernelBuilder again(jobs, 90, runtime_headers(), cache);
    CHECK(again.compiled() == 1);  // only the broken one is not in the cache
    CHECK_FALSE(again.wait(1).error.empty());
  }
  SECTION("more kernels than a program takes, or two of one name: several programs") {
    std::vector<KernelJob> jobs;
    for (std::size_t i = 0; i < kProgramKernels + 2; ++i)
      jobs.push_back(job("k" + std::to_string(i), "return v + " + std::to_string(i) + ".0f;"));
    // The name of a kernel in the second program, another source: a program of its own.
    jobs.push_back(job("k" + std::to_string(kProgramKernels), "return v - 1.0f;"));
    KernelBuilder b(jobs, 90, runtime_headers(), cache);
    for (std::size_t k = 0; k < jobs.size(); ++k) {
      CAPTURE(k);
      CHECK(b.wait(k).error.empty());
    }
    CHECK(b.wait(0).program_kernels == kProgramKernels);
    CHECK(b.wait(kProgramKernels).program_kernels == 2);
    CHECK(b.wait(jobs.size() - 1).program_kernels == 1);
    CHECK(b.programs() == 3);
  }
}

TEST_CASE("a program's source: the headers once, each kernel's source in its own namespace",
          "[fusion][compile]") {
  using hotpath::detail::KernelJob;
  const KernelJob a{"#include \"hotpath_runtime.cuh\"\ntypedef int idx_t;\nA\n", "a", ""};
  const KernelJob b{"#include \"hotpath_runtime.cuh\"\n#include \"other.cuh\"\nB\n", "b", ""};
  CHECK(hotpath::detail::program_source({&a, &b}) ==
        "#include \"hotpath_runtime.cuh\"\n"
        "#include \"other.cuh\"\n"
        "namespace hotpath_unit_0 {\ntypedef int idx_t;\nA\n}  // namespace hotpath_unit_0\n"
        "namespace hotpath_unit_1 {\nB\n}  // namespace hotpath_unit_1\n");
}

TEST_CASE("an NVRTC failure names the error and the dumped source", "[fusion][nvrtc]") {
  const hotpath_test::TempDir tmp("hotpath-dump-test");
  const std::string dir = tmp.path();
  const std::string dumped = dir + "/broken.cu";
  try {
    hotpath::detail::nvrtc_compile("extern \"C\" __global__ void k() { undefined_thing(); }",
                                   "broken", 90, {}, dir);
    FAIL("no error");
  } catch (const hotpath::Error& e) {
    const std::string msg = e.what();
    CHECK(msg.find("undefined_thing") != std::string::npos);
    CHECK(msg.find(dumped) != std::string::npos);
    CHECK(msg.find("nvrtc.cpp:") != std::string::npos);
  }
  CHECK(std::ifstream(dumped).good());
  std::remove(dumped.c_str());
  ::rmdir(dir.c_str());
}

TEST_CASE("the kernel cache: a missing, read-only or truncated directory", "[fusion][cache]") {
  const hotpath_test::TempDir tmp("hotpath-cache-faults");
  const std::string key = hotpath::detail::kernel_cache_key("source", 90);
  // Missing: made on the first store, nested.
  hotpath::detail::KernelCache missing(tmp.path() + "/a/b/c");
  CHECK_FALSE(missing.load(key).has_value());
  missing.store(key, "cubin");
  CHECK(missing.load(key).value() == "cubin");
  // Truncated entries (a crash mid-write) are misses, never loaded.
  {
    std::ifstream in(missing.path(key), std::ios::binary);
    std::string whole((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (std::size_t cut : {std::size_t{0}, std::size_t{3}, whole.size() - 1}) {
      std::ofstream(missing.path(key), std::ios::binary | std::ios::trunc) << whole.substr(0, cut);
      CAPTURE(cut);
      CHECK_FALSE(missing.load(key).has_value());
    }
  }
  // Read-only: storing fails quietly (a recompile next run), loading misses.
  if (geteuid() != 0) {  // root writes anyway
    const std::string ro = tmp.path() + "/ro";
    ::mkdir(ro.c_str(), 0555);
    hotpath::detail::KernelCache cache(ro);
    CHECK_NOTHROW(cache.store(key, "cubin"));
    CHECK_FALSE(cache.load(key).has_value());
  }
  // A path that is a file, not a directory: the same.
  const std::string file = tmp.path() + "/file";
  std::ofstream(file) << "x";
  hotpath::detail::KernelCache not_dir(file);
  CHECK_NOTHROW(not_dir.store(key, "cubin"));
  CHECK_FALSE(not_dir.load(key).has_value());
}

TEST_CASE("a pointwise kernel's grid-stride loops are not unrolled: compiled once each",
          "[fusion][nvrtc]") {
  // Each unrolled copy of a loop inlines the element function again, at the cost of compile time
  // only (AdamW's update: 46 square roots, 300 ms of NVRTC on a desktop CPU, 131 ms without).
  // The element function is there once per lane of the vector loop, once in its tail and once
  // in the path for unaligned data: as many square roots as that for AdamW's one.
  int checked = 0;
  for (const auto& spec : adamw_update_kernels(/*multi=*/true)) {
    REQUIRE(spec.vec > 1);
    REQUIRE(!spec.multi_name.empty());  // the multi entry calls the same loops
    const std::string ptx =
        hotpath::detail::nvrtc_ptx(spec.source, spec.name, 90, hotpath::detail::runtime_headers());
    int roots = 0;
    for (std::size_t at = ptx.find("sqrt.rn.f32"); at != std::string::npos;
         at = ptx.find("sqrt.rn.f32", at + 1))
      ++roots;
    INFO(spec.source);
    CHECK(roots == spec.vec + 2);
    ++checked;
  }
  CHECK(checked > 0);
}

TEST_CASE("a plan's kernels compile in the order that saves the most first", "[fusion][compile]") {
  // Groups the interpreter cannot run wait for their own kernels eagerly: they go first; then
  // the rest; the larger groups first within each; CPU groups compile nothing.
  hotpath::detail::Plan plan;
  auto group = [&](int ops, bool gpu, bool interpretable) {
    hotpath::detail::PlanGroup g;
    g.ops.resize(static_cast<std::size_t>(ops));
    g.gpu = gpu;
    if (!interpretable) g.spec.not_interpretable = "a row kernel";
    plan.groups.push_back(std::move(g));
  };
  group(3, true, true);    // 0
  group(5, true, true);    // 1
  group(2, true, false);   // 2
  group(9, false, false);  // 3: CPU
  group(4, true, false);   // 4
  group(5, true, true);    // 5: ties with 1, after it
  CHECK(hotpath::detail::compile_order(plan) == std::vector<int>{4, 2, 1, 5, 0});
  CHECK(hotpath::detail::compile_order(hotpath::detail::Plan{}).empty());
}

TEST_CASE("a job on the side worker does not hold up the plans' worker", "[fusion][compile]") {
  // The interpreter kernel compiles on the side worker (seconds where no prebuilt copy fits):
  // a plan submitted after it must not wait for it. Here the side job waits for the plan's.
  using hotpath::detail::CompileWorker;
  std::promise<void> plan_ran;
  std::shared_future<void> plan_done = plan_ran.get_future().share();
  bool side_saw_plan = false;
  CompileWorker::side().submit([plan_done, &side_saw_plan] {
    side_saw_plan = plan_done.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  });
  CompileWorker::instance().submit([&plan_ran] { plan_ran.set_value(); });
  CompileWorker::instance().drain();
  CompileWorker::side().drain();
  CHECK(side_saw_plan);
  // wait_for_compilation waits for the plans' worker, and for the interpreter only where a plan's
  // group runs on it for want of its own kernel (none here): a loop whose kernels are all in must
  // not wait seconds for a stand-in it no longer needs.
  std::promise<void> returned;
  std::shared_future<void> wait_returned = returned.get_future().share();
  bool side_saw_return = false;
  CompileWorker::side().submit([wait_returned, &side_saw_return] {
    side_saw_return = wait_returned.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  });
  hotpath::wait_for_compilation();
  returned.set_value();
  CompileWorker::side().drain();
  CHECK(side_saw_return);
}
