// Pointwise kernels (codegen/kernel.h): a fusion group of elementwise ops over one domain becomes
// one kernel (loads, each op's expression, stores; 16-byte vector loads where every operand
// allows) and the interpreter's program for the same group, built alongside.
#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "codegen/interpreter.h"
#include "codegen/kernel.h"
#include "common/error.h"
#include "common/hash.h"
#include "fusion/op_table.h"

namespace hotpath::detail {
namespace {

std::size_t elem_size(c10::ScalarType t) { return c10::elementSize(t); }

// The rounding of an interpreter instruction's result to `t`.
unsigned char program_type(c10::ScalarType t) {
  return t == c10::ScalarType::Half       ? hp::kF16
         : t == c10::ScalarType::BFloat16 ? hp::kBF16
                                          : hp::kF32;
}

// The interpreter's opcode of a plain cast: _to_copy passes its operand, the instruction rounds.
short cast_form() {
  static const short form = [] {
    const auto& forms = op_forms();
    for (std::size_t i = 0; i < forms.size(); ++i)
      if (forms[i].key == "_to_copy") return static_cast<short>(i);
    HOTPATH_CHECK(false, "the op table has no _to_copy");
    return short{-1};
  }();
  return form;
}

// A value the kernel stores: into tensor parameter `param`, `offset` elements past the element
// of the domain's coordinates (a stack's or cat's input in its place in the result).
struct Store {
  int param = 0;
  std::string var;
  std::int64_t offset = 0;
};

}  // namespace

KernelSpec generate_pointwise_kernel(const Graph& g, const FusionGroup& group, bool multi) {
  KernelSpec spec;
  const TensorMeta& dom = group.domain;
  const std::vector<std::int64_t> dsizes(dom.sizes.begin(), dom.sizes.end());
  spec.numel = dom.numel();
  const std::vector<std::int64_t> lin = contiguous_strides(dsizes);

  GroupParams params(g, group, spec);

  // Element body: loads, per-node expressions, stores.
  std::ostringstream body;
  std::map<int, std::string> var;    // value id -> C++ name
  std::map<int, int> final_version;  // tensor -> value id of its last version in the group
  std::vector<std::string> scalar_params;
  std::set<int> loaded;
  std::vector<std::pair<int, std::string>> loads;  // param index, variable
  // The interpreter's program, built alongside: registers per variable.
  hp::Program& prog = spec.program;
  std::map<std::string, int> reg;
  std::map<std::string, int> scalar_slot;  // scalar name -> kernel argument
  std::vector<hp::ProgramInstr> code;
  auto why_not = [&](const std::string& why) {
    if (spec.not_interpretable.empty()) spec.not_interpretable = why;
  };
  // The variable holding value `v`: a load, the first time a value from outside is read.
  auto operand = [&](int v) {
    if (!var.count(v)) {
      HOTPATH_CHECK(!params.in_group(v), "value %", v, " used before it is computed");
      const int idx = static_cast<int>(params.tensor(v));
      // Names count within the group, so that groups doing the same work read the same.
      const std::string name = "x" + std::to_string(loads.size());
      loads.emplace_back(idx, name);
      var[v] = name;
      reg[name] = static_cast<int>(reg.size());
    }
    return var[v];
  };
  // A stack's or cat's stores: its inputs, each at its place in the result (op_table.h).
  std::vector<Store> sink_stores;
  std::map<std::size_t, std::vector<std::int64_t>> sink_strides;  // result param -> strides
  for (std::size_t mi = 0; mi < group.nodes.size(); ++mi) {
    const Node& n = g.node(group.nodes[mi]);
    if (is_sink(n)) {
      why_not(n.short_name() + " stores into a strided result");
      const SinkView view = sink_view(g, n);
      const std::size_t idx = params.tensor(n.outputs[0]);
      spec.args[idx].written = true;
      spec.args[idx].optional = !made_by_last(g, group, g.value(n.outputs[0]).tensor);
      sink_strides[idx] = view.strides;
      for (std::size_t k = 0; k < n.inputs.size(); ++k)
        sink_stores.push_back(
            Store{static_cast<int>(idx), operand(n.inputs[k].value), view.offsets[k]});
      continue;
    }
    const PointwiseOp* op = find_pointwise(n);
    HOTPATH_CHECK(op != nullptr, "node ", n.index, " (", n.short_name(), ") is not fusable");
    std::vector<std::string> t, s;
    for (int a : op->tensors) t.push_back(operand(n.input_at(a)));
    for (int a : op->scalars) {
      if (n.args[static_cast<std::size_t>(a)].isNone()) {
        s.emplace_back();
        continue;
      }
      const std::string name = "s" + std::to_string(scalar_params.size());
      scalar_slot[name] = static_cast<int>(params.scalar(static_cast<int>(mi), a, name));
      scalar_params.push_back(name);
      s.push_back(name);
    }
    const int out = n.outputs[0];
    const std::string name = "v" + std::to_string(mi);
    const auto dt = g.value(out).meta.dtype;
    const std::vector<double> imm = op->immediates ? op->immediates(n, g) : std::vector<double>{};
    const std::string expr = pointwise_expression(g, n, *op, t, s);
    {
      hp::ProgramInstr in{};
      in.op = static_cast<short>(op_form_index(g, n));
      unsigned char* operands[] = {&in.a, &in.b, &in.c};
      if (t.size() > 3 || imm.size() > 1) why_not(n.short_name() + " has too many operands");
      // An operand eager casts to the op's dtype first: a cast into a register of its own.
      const auto round = operand_rounding(g, n, *op);
      for (std::size_t k = 0; k < t.size() && k < 3; ++k) {
        *operands[k] = static_cast<unsigned char>(reg.at(t[k]));
        if (round[k] == c10::ScalarType::Float) continue;
        hp::ProgramInstr cast{};
        cast.op = cast_form();
        cast.a = *operands[k];
        cast.round = program_type(round[k]);
        const std::string cast_name = name + "_operand" + std::to_string(k);
        reg[cast_name] = static_cast<int>(reg.size());
        cast.dst = static_cast<unsigned char>(reg.at(cast_name) % 256);
        code.push_back(cast);
        *operands[k] = cast.dst;
      }
      // Scalar slots are kernel argument positions; a None operand reads slot 0 unused.
      std::vector<int> slots;
      for (const std::string& sn : s) slots.push_back(sn.empty() ? 0 : scalar_slot.at(sn));
      if (slots.size() > 2) why_not(n.short_name() + " has too many scalars");
      in.s0 = static_cast<unsigned char>(slots.size() > 0 ? slots[0] : 0);
      in.s1 = static_cast<unsigned char>(slots.size() > 1 ? slots[1] : 0);
      in.imm = imm.empty() ? 0.0f : static_cast<float>(imm[0]);
      in.round = program_type(dt);
      if (dt != c10::ScalarType::Float && dt != c10::ScalarType::Half &&
          dt != c10::ScalarType::BFloat16)
        why_not(n.short_name() + " makes " + c10::toString(dt));
      reg[name] = static_cast<int>(reg.size());
      in.dst = static_cast<unsigned char>(reg.at(name) % 256);
      code.push_back(in);
    }
    body << "    const float " << name << " = " << expr << ";  // " << n.short_name() << "\n";
    var[out] = name;
    if (op->writes >= 0) {
      KernelArg& p = spec.args[params.tensor(n.input_at(op->writes))];
      p.written = true;
    } else {
      KernelArg& p = spec.args[params.tensor(out)];
      p.written = true;
    }
    final_version[g.value(out).tensor] = out;
  }

  // Stores: the last version of each tensor the group writes. A tensor the group made is
  // optional unless the last member returns it.
  std::vector<Store> stores;
  for (const auto& [tensor, value] : final_version) {
    const int idx = params.param_of_tensor.at(tensor);
    KernelArg& p = spec.args[static_cast<std::size_t>(idx)];
    if (!p.written) continue;
    p.optional = p.output >= 0 && !made_by_last(g, group, tensor);
    stores.push_back(Store{idx, var[value], 0});
  }
  stores.insert(stores.end(), sink_stores.begin(), sink_stores.end());

  // Indexing per tensor parameter.
  bool use64 = spec.numel > (1LL << 31) - 1;
  int max_elem = 1;
  bool all_linear = true;
  std::vector<std::vector<std::int64_t>> strides(spec.args.size());
  for (std::size_t i = 0; i < spec.args.size(); ++i) {
    KernelArg& a = spec.args[i];
    if (a.kind != KernelArg::Kind::Tensor) continue;
    const TensorMeta& m = *params.meta_of_param.at(static_cast<int>(i));
    a.name = "t" + std::to_string(i);
    // A tensor the group writes has the domain's shape: with one element (a 0-dim domain) it is
    // linear, not broadcast.
    a.single = m.numel() == 1 && !a.written;
    const auto sink = sink_strides.find(i);
    strides[i] = sink != sink_strides.end() ? sink->second : domain_strides(m, dom);
    a.linear = !a.single && sink == sink_strides.end() && strides[i] == lin;
    if (!a.single) {
      all_linear = all_linear && a.linear;
      max_elem = std::max<int>(max_elem, static_cast<int>(elem_size(a.dtype)));
    }
    if (max_offset(m) > (1LL << 31) - 1) use64 = true;
  }
  spec.vec = all_linear ? 16 / max_elem : 1;

  // The program's slots, loads and stores.
  if (spec.args.size() > static_cast<std::size_t>(hp::kProgramSlots)) why_not("too many arguments");
  if (loads.size() > static_cast<std::size_t>(hp::kProgramIo) ||
      stores.size() > static_cast<std::size_t>(hp::kProgramIo))
    why_not("too many loads or stores");
  if (code.size() > static_cast<std::size_t>(hp::kProgramCode)) why_not("too many ops");
  if (reg.size() > static_cast<std::size_t>(hp::kProgramRegs)) why_not("too many values");
  if (spec.interpretable()) {
    for (std::size_t i = 0; i < spec.args.size(); ++i) {
      const KernelArg& a = spec.args[i];
      if (a.kind != KernelArg::Kind::Tensor) continue;
      if (!a.linear && !a.single) why_not("a strided or broadcast operand");
      prog.single[i] = a.single ? 1 : 0;
      switch (a.dtype) {
        case c10::ScalarType::Float:
          prog.type[i] = hp::kF32;
          break;
        case c10::ScalarType::Half:
          prog.type[i] = hp::kF16;
          break;
        case c10::ScalarType::BFloat16:
          prog.type[i] = hp::kBF16;
          break;
        case c10::ScalarType::Bool:
          prog.type[i] = hp::kBool;
          if (a.written) why_not("a bool result");
          break;
        default:
          why_not(std::string("a ") + c10::toString(a.dtype) + " operand");
      }
    }
    prog.loads = static_cast<int>(loads.size());
    for (std::size_t k = 0; k < loads.size(); ++k) {
      prog.load_slot[k] = static_cast<unsigned char>(loads[k].first);
      prog.load_reg[k] = static_cast<unsigned char>(reg.at(loads[k].second));
    }
    prog.stores = static_cast<int>(stores.size());
    for (std::size_t k = 0; k < stores.size(); ++k) {
      prog.store_slot[k] = static_cast<unsigned char>(stores[k].param);
      prog.store_reg[k] = static_cast<unsigned char>(reg.at(stores[k].var));
    }
    prog.code = static_cast<int>(code.size());
    for (std::size_t k = 0; k < code.size(); ++k) prog.instr[k] = code[k];
    prog.numel = spec.numel;
    if (spec.interpretable() && allocate_registers(prog) > hp::kProgramFile)
      why_not("more live values than the interpreter has registers");
  }
  spec.vec_bytes = spec.vec > 1 ? 16 : 0;

  // The element count is a kernel parameter: groups that differ only in size (an optimizer's
  // update of each parameter) share one kernel, compiled once. Sizes and strides of broadcast or
  // strided operands stay in the source (the signature guarantees them).
  spec.index64 = use64;
  std::ostringstream src;
  src << "// hotpath fused kernel: " << group.nodes.size() << " ops";
  if (!all_linear) src << " over " << format_meta(dom);
  src << "\n//  ";
  for (int m : group.nodes) src << " " << g.node(m).short_name();
  src << "\n#include \"hotpath_runtime.cuh\"\n\n";
  src << "typedef " << (use64 ? "long long" : "int") << " idx_t;\n\n";

  // The element function: loaded operands in, values to store out.
  src << "__device__ __forceinline__ void element(";
  bool first = true;
  for (const auto& [idx, name] : loads) {
    (void)idx;
    src << (first ? "" : ", ") << "const float " << name;
    first = false;
  }
  for (const auto& sp : scalar_params) {
    src << (first ? "" : ", ") << "const float " << sp;
    first = false;
  }
  for (std::size_t k = 0; k < stores.size(); ++k) {
    src << (first ? "" : ", ") << "float& y" << k;
    first = false;
  }
  src << ") {\n" << body.str();
  for (std::size_t k = 0; k < stores.size(); ++k)
    src << "    y" << k << " = " << stores[k].var << ";\n";
  src << "}\n\n";

  // The work of the kernel's blocks, for one launch (the kernel) or one segment of several.
  // Kernel parameters are at most 4 KiB.
  spec.multi_segments =
      static_cast<int>(std::min<std::size_t>(kMaxSegments, (4000 - 8) / multi_segment_bytes(spec)));
  if (spec.multi_segments < 2) spec.multi_segments = 0;
  // With a multi entry, not inlined into the two entries: compiled once for both (NVRTC takes
  // about half the time: AdamW's kernel 176 -> 100 ms on a desktop CPU). Alone, inlined: the
  // 64M-element chain ran at 79.7-80.6% of the copy bandwidth with the call, 80.2-81.4% without.
  const bool multi_entry_too = multi && spec.multi_segments > 0;
  src << (multi_entry_too ? "__device__ __noinline__ void run"
                          : "__device__ __forceinline__ void run")
      << parameter_list(spec, ",\n    const idx_t block_index,\n    const idx_t blocks");
  src << "  const idx_t stride = blocks * blockDim.x;\n";
  src << "  const idx_t start = block_index * blockDim.x + threadIdx.x;\n";
  for (const auto& [idx, name] : loads) {
    const KernelArg& a = spec.args[static_cast<std::size_t>(idx)];
    if (a.single) src << "  const float " << name << " = hp::to_float(" << a.name << "[0]);\n";
  }
  auto call = [&](const std::string& lane) {
    std::ostringstream c;
    c << "element(";
    bool f = true;
    for (const auto& [idx, name] : loads) {
      const KernelArg& a = spec.args[static_cast<std::size_t>(idx)];
      c << (f ? "" : ", ") << (a.single ? name : name + lane);
      f = false;
    }
    for (const auto& sp : scalar_params) {
      c << (f ? "" : ", ") << sp;
      f = false;
    }
    for (std::size_t k = 0; k < stores.size(); ++k) {
      c << (f ? "" : ", ") << "y" << k << lane;
      f = false;
    }
    c << ")";
    return c.str();
  };
  // The grid-stride loops are not unrolled (`#pragma unroll 1`): left to itself NVRTC unrolls
  // each of them, and each copy inlines the element function again (AdamW's update held 46
  // square roots, 1928 lines of PTX). A block's threads already have their loads in flight for
  // the bandwidth (16 bytes a tensor a thread in the vector loop): on an H100 the 64M-element
  // chain ran at 89.4% of the copy either way. The copies cost compile time and code: AdamW's
  // kernel took 300 -> 131 ms of NVRTC on a 2-core CPU (the GPU machine's CPU compiles the MLP
  // plan's program in 30-40 ms either way), its cubin 124 -> 54 KB.
  // Scalar path body for linear index i with per-tensor offsets.
  auto scalar_loop = [&](const std::string& begin, bool linear_only) {
    std::ostringstream l;
    l << "#pragma unroll 1\n  for (idx_t i = " << begin << "; i < kNumel; i += stride) {\n";
    if (!linear_only) {
      // Offsets of non-linear tensors from the domain coordinates.
      std::vector<std::size_t> general;
      for (std::size_t i = 0; i < spec.args.size(); ++i) {
        const auto& a = spec.args[i];
        if (a.kind == KernelArg::Kind::Tensor && !a.single && !a.linear) general.push_back(i);
      }
      if (!general.empty()) {
        l << "    idx_t rest = i;\n";
        for (std::size_t i : general) l << "    idx_t o" << i << " = 0;\n";
        for (std::size_t d = dsizes.size(); d-- > 0;) {
          if (dsizes[d] == 1) continue;
          l << "    { const idx_t c = rest % " << dsizes[d] << "; rest /= " << dsizes[d] << ";";
          for (std::size_t i : general) {
            if (strides[i][d] != 0) l << " o" << i << " += c * " << strides[i][d] << ";";
          }
          l << " }\n";
        }
      }
    }
    auto offset = [&](std::size_t idx) {
      const auto& a = spec.args[idx];
      if (a.linear || linear_only) return std::string("i");
      return "o" + std::to_string(idx);
    };
    for (const auto& [idx, name] : loads) {
      const auto& a = spec.args[static_cast<std::size_t>(idx)];
      if (a.single) continue;
      l << "    const float " << name << "_ = hp::to_float(" << a.name << "["
        << offset(static_cast<std::size_t>(idx)) << "]);\n";
    }
    for (std::size_t k = 0; k < stores.size(); ++k) l << "    float y" << k << "_;\n";
    l << "    " << call("_") << ";\n";
    for (std::size_t k = 0; k < stores.size(); ++k) {
      const auto& a = spec.args[static_cast<std::size_t>(stores[k].param)];
      const std::int64_t off = stores[k].offset;
      l << "    " << (a.optional ? "if (" + a.name + " != nullptr) " : "") << a.name << "["
        << offset(static_cast<std::size_t>(stores[k].param))
        << (off != 0 ? " + " + std::to_string(off) : "") << "] = hp::from_float<"
        << cuda_type(a.dtype) << ">(y" << k << "_);\n";
    }
    l << "  }\n";
    return l.str();
  };

  if (spec.vec > 1) {
    const int V = spec.vec;
    src << "  if (vector_ok) {\n";
    src << "    const idx_t kVectors = kNumel / " << V << ";\n";
    src << "#pragma unroll 1\n    for (idx_t v = start; v < kVectors; v += stride) {\n";
    for (const auto& [idx, name] : loads) {
      const auto& a = spec.args[static_cast<std::size_t>(idx)];
      if (a.single) continue;
      src << "      const auto " << name << "_v = hp::load_vec<" << V << ">(" << a.name
          << ", v);\n";
    }
    for (std::size_t k = 0; k < stores.size(); ++k) {
      const auto& a = spec.args[static_cast<std::size_t>(stores[k].param)];
      src << "      hp::Vec<" << cuda_type(a.dtype) << ", " << V << "> y" << k << "_v;\n";
    }
    src << "#pragma unroll\n      for (int k = 0; k < " << V << "; ++k) {\n";
    for (const auto& [idx, name] : loads) {
      const auto& a = spec.args[static_cast<std::size_t>(idx)];
      if (a.single) continue;
      src << "        const float " << name << "_k = hp::to_float(" << name << "_v.v[k]);\n";
    }
    for (std::size_t k = 0; k < stores.size(); ++k) src << "        float y" << k << "_k;\n";
    src << "        " << call("_k") << ";\n";
    for (std::size_t k = 0; k < stores.size(); ++k) {
      const auto& a = spec.args[static_cast<std::size_t>(stores[k].param)];
      src << "        y" << k << "_v.v[k] = hp::from_float<" << cuda_type(a.dtype) << ">(y" << k
          << "_k);\n";
    }
    src << "      }\n";
    for (std::size_t k = 0; k < stores.size(); ++k) {
      const auto& a = spec.args[static_cast<std::size_t>(stores[k].param)];
      src << "      " << (a.optional ? "if (" + a.name + " != nullptr) " : "") << "hp::store_vec<"
          << V << ">(" << a.name << ", v, y" << k << "_v);\n";
    }
    src << "    }\n";
    std::string tail = scalar_loop("kVectors * " + std::to_string(V) + " + start", true);
    // indent the tail loop inside the if
    std::istringstream tl(tail);
    for (std::string line; std::getline(tl, line);) src << "  " << line << "\n";
    src << "    return;\n  }\n";
  }
  src << scalar_loop("start", false);
  src << "}\n\n";
  src << kernel_signature(spec) << "  run(";
  for (const KernelArg& a : spec.args) src << a.name << ", ";
  src << "kNumel, vector_ok, blockIdx.x, gridDim.x);\n}\n\n";
  if (multi && spec.multi_segments > 0) src << multi_entry(spec);
  name_kernel(spec, group.name, src.str());
  if (multi && spec.multi_segments > 0) spec.multi_name = spec.name + "_multi";
  return spec;
}

}  // namespace hotpath::detail
