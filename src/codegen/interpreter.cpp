#include "codegen/interpreter.h"

#include <sstream>
#include <vector>

#include "fusion/op_table.h"

namespace hotpath::detail {

const std::string& interpreter_source() {
  static const std::string source = [] {
    std::ostringstream s;
    s << R"(// hotpath interpreter: runs a fusion group's bytecode (hp::Program). Each thread takes kE
// elements of a tile, so that every instruction is decoded once for kE elements; registers
// live in per-thread local memory, laid out so that a warp's accesses coalesce.
#include "hotpath_runtime.cuh"
#include "program.cuh"

)";
    s << "constexpr int kE = " << kInterpreterElements << ";\n";
    s << R"(

template <typename T>
__device__ __forceinline__ void hp_load_tile(const void* ptr, bool single, long long base,
                                             long long numel, float* r) {
  const T* t = static_cast<const T*>(ptr);
#pragma unroll
  for (int e = 0; e < kE; ++e) {
    const long long i = base + static_cast<long long>(e) * blockDim.x;
    r[e] = i < numel ? hp::to_float(t[single ? 0 : i]) : 0.0f;
  }
}

template <typename T>
__device__ __forceinline__ void hp_store_tile(void* ptr, long long base, long long numel,
                                              const float* r) {
  T* t = static_cast<T*>(ptr);
#pragma unroll
  for (int e = 0; e < kE; ++e) {
    const long long i = base + static_cast<long long>(e) * blockDim.x;
    if (i < numel) t[i] = hp::from_float<T>(r[e]);
  }
}

extern "C" __global__ void __launch_bounds__(256) hotpath_interpreter(
    const __grid_constant__ hp::Program p) {
  float r[hp::kProgramRegs][kE];
  const long long tile = static_cast<long long>(blockDim.x) * kE;
  for (long long first = static_cast<long long>(blockIdx.x) * tile; first < p.numel;
       first += static_cast<long long>(gridDim.x) * tile) {
    const long long base = first + threadIdx.x;
    for (int k = 0; k < p.loads; ++k) {
      const int slot = p.load_slot[k];
      float* d = r[p.load_reg[k]];
      switch (p.type[slot]) {
        case hp::kF16:
          hp_load_tile<hp::half>(p.ptr[slot], p.single[slot], base, p.numel, d);
          break;
        case hp::kBF16:
          hp_load_tile<hp::bfloat16>(p.ptr[slot], p.single[slot], base, p.numel, d);
          break;
        case hp::kBool:
          hp_load_tile<bool>(p.ptr[slot], p.single[slot], base, p.numel, d);
          break;
        default:
          hp_load_tile<float>(p.ptr[slot], p.single[slot], base, p.numel, d);
      }
    }
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
      if (in.round == hp::kF16) {
        for (int e = 0; e < kE; ++e) d[e] = hp::round_to<hp::half>(d[e]);
      } else if (in.round == hp::kBF16) {
        for (int e = 0; e < kE; ++e) d[e] = hp::round_to<hp::bfloat16>(d[e]);
      }
    }
    for (int k = 0; k < p.stores; ++k) {
      const int slot = p.store_slot[k];
      if (p.ptr[slot] == nullptr) continue;
      const float* v = r[p.store_reg[k]];
      switch (p.type[slot]) {
        case hp::kF16:
          hp_store_tile<hp::half>(p.ptr[slot], base, p.numel, v);
          break;
        case hp::kBF16:
          hp_store_tile<hp::bfloat16>(p.ptr[slot], base, p.numel, v);
          break;
        default:
          hp_store_tile<float>(p.ptr[slot], base, p.numel, v);
      }
    }
  }
}
)";
    return s.str();
  }();
  return source;
}

}  // namespace hotpath::detail
