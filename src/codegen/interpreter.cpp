#include "codegen/interpreter.h"

#include <sstream>
#include <vector>

#include "fusion/op_table.h"

namespace hotpath::detail {

const std::string& interpreter_source() {
  static const std::string source = [] {
    std::ostringstream s;
    s << R"(// hotpath interpreter: runs a fusion group's bytecode (hp::Program), element by element.
#include "hotpath_runtime.cuh"
#include "program.cuh"

__device__ __forceinline__ float hp_load(const hp::Program& p, int slot, long long i) {
  const long long k = p.single[slot] ? 0 : i;
  switch (p.type[slot]) {
    case hp::kF16:
      return hp::to_float(static_cast<const hp::half*>(p.ptr[slot])[k]);
    case hp::kBF16:
      return hp::to_float(static_cast<const hp::bfloat16*>(p.ptr[slot])[k]);
    case hp::kBool:
      return hp::to_float(static_cast<const bool*>(p.ptr[slot])[k]);
    default:
      return static_cast<const float*>(p.ptr[slot])[k];
  }
}

__device__ __forceinline__ void hp_store(const hp::Program& p, int slot, long long i, float v) {
  switch (p.type[slot]) {
    case hp::kF16:
      static_cast<hp::half*>(p.ptr[slot])[i] = hp::from_float<hp::half>(v);
      break;
    case hp::kBF16:
      static_cast<hp::bfloat16*>(p.ptr[slot])[i] = hp::from_float<hp::bfloat16>(v);
      break;
    default:
      static_cast<float*>(p.ptr[slot])[i] = v;
  }
}

// One instruction: the op table's expression for form `op` on registers A, B, C, scalars P, Q
// and the immediate I.
__device__ __noinline__ float hp_exec(int op, float A, float B, float C, float P, float Q,
                                      float I) {
  switch (op) {
)";
    const auto& forms = op_forms();
    const std::vector<std::string> t = {"A", "B", "C"}, sc = {"P", "Q"}, imm = {"I"};
    for (std::size_t i = 0; i < forms.size(); ++i) {
      const OpForm& f = forms[i];
      std::vector<std::string> tt(t.begin(),
                                  t.begin() + static_cast<std::ptrdiff_t>(f.op->tensors.size()));
      std::vector<std::string> ss(sc.begin(),
                                  sc.begin() + static_cast<std::ptrdiff_t>(f.op->scalars.size()));
      s << "    case " << i << ":  // " << f.key << (f.variant.empty() ? "" : " " + f.variant)
        << "\n      return " << f.op->emit(tt, ss, imm, f.variant) << ";\n";
    }
    s << R"(    default:
      return __int_as_float(0x7fffffff);  // NaN: an opcode this build does not know
  }
}

extern "C" __global__ void __launch_bounds__(256) hotpath_interpreter(
    const __grid_constant__ hp::Program p) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < p.numel;
       i += stride) {
    float r[hp::kProgramRegs];
    for (int k = 0; k < p.loads; ++k) r[p.load_reg[k]] = hp_load(p, p.load_slot[k], i);
    for (int k = 0; k < p.code; ++k) {
      const hp::ProgramInstr& in = p.instr[k];
      float v = hp_exec(in.op, r[in.a], r[in.b], r[in.c], p.scalar[in.s0], p.scalar[in.s1],
                        in.imm);
      if (in.round == hp::kF16) v = hp::round_to<hp::half>(v);
      if (in.round == hp::kBF16) v = hp::round_to<hp::bfloat16>(v);
      r[in.dst] = v;
    }
    for (int k = 0; k < p.stores; ++k) {
      if (p.ptr[p.store_slot[k]] != nullptr) hp_store(p, p.store_slot[k], i, r[p.store_reg[k]]);
    }
  }
}
)";
    return s.str();
  }();
  return source;
}

}  // namespace hotpath::detail
