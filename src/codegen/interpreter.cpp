#include "codegen/interpreter.h"

#include <sstream>
#include <vector>

#include "fusion/op_table.h"

namespace hotpath::detail {

const std::string& interpreter_source() {
  static const std::string source = [] {
    std::ostringstream s;
    s << R"(// hotpath interpreter: runs a fusion group's bytecode (hp::Program); its fixed part is
// runtime/interpreter.cuh, the op forms' cases follow.
#include "interpreter.cuh"

)";
    s << "constexpr int kE = " << kInterpreterElements << ";\n";
    s << R"(
extern "C" __global__ void __launch_bounds__(256) hotpath_interpreter(
    const __grid_constant__ hp::Program p) {
  float r[hp::kProgramRegs][kE];
  const long long tile = static_cast<long long>(blockDim.x) * kE;
  for (long long first = static_cast<long long>(blockIdx.x) * tile; first < p.numel;
       first += static_cast<long long>(gridDim.x) * tile) {
    const long long base = first + threadIdx.x;
    hp::load_registers<kE>(p, base, r);
    for (int k = 0; k < p.code; ++k) {
      const hp::ProgramInstr& in = p.instr[k];
      float* d = r[in.dst];
      const float* A = r[in.a];
      const float* B = r[in.b];
      const float* C = r[in.c];
      const float P = p.scalar[in.s0];
      const float Q = p.scalar[in.s1];
      const float I = in.imm;
      // The op table's expression for form `in.op`, on kE elements.
      switch (in.op) {
)";
    const auto& forms = op_forms();
    const std::vector<std::string> t = {"A[e]", "B[e]", "C[e]"}, sc = {"P", "Q"}, imm = {"I"};
    for (std::size_t i = 0; i < forms.size(); ++i) {
      const OpForm& f = forms[i];
      std::vector<std::string> tt(t.begin(),
                                  t.begin() + static_cast<std::ptrdiff_t>(f.op->tensors.size()));
      std::vector<std::string> ss(sc.begin(),
                                  sc.begin() + static_cast<std::ptrdiff_t>(f.op->scalars.size()));
      s << "        case " << i << ":  // " << f.key << (f.variant.empty() ? "" : " " + f.variant)
        << "\n"
        << "          for (int e = 0; e < kE; ++e) d[e] = " << f.op->emit(tt, ss, imm, f.variant)
        << ";\n          break;\n";
    }
    s << R"(        default:  // an opcode this build does not know: NaN shows it
          for (int e = 0; e < kE; ++e) d[e] = __int_as_float(0x7fffffff);
      }
      hp::round_result<kE>(in.round, d);
    }
    hp::store_registers<kE>(p, base, r);
  }
}
)";
    return s.str();
  }();
  return source;
}

}  // namespace hotpath::detail
