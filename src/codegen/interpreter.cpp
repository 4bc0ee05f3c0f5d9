#include "codegen/interpreter.h"

#include <sstream>
#include <vector>

#include "common/error.h"
#include "fusion/op_table.h"

namespace hotpath::detail {

const std::string& interpreter_source() {
  static const std::string source = [] {
    std::ostringstream s;
    s << R"(// hotpath interpreter: runs a fusion group's bytecode (hp::Program); its fixed part is
// runtime/interpreter.cuh, the op forms' cases follow. Its module carries replay's fingerprint
// kernel too (runtime/fingerprint.cuh): loaded with it, no module of its own to wait for.
#include "interpreter.cuh"
#include "fingerprint.cuh"

)";
    s << "constexpr int kE = " << kInterpreterElements << ";\n";
    s << "constexpr int kS = " << kInterpreterBlock << ";  // the block's threads\n";
    s << R"(
// Launched with kS threads a block and Program::regs * kE * kS floats of dynamic shared memory.
extern "C" __global__ void __launch_bounds__(kS) hotpath_interpreter(
    const __grid_constant__ hp::Program p) {
  extern __shared__ float hotpath_file[];
  float* const file = hotpath_file + threadIdx.x;
  const long long tile = static_cast<long long>(kS) * kE;
  for (long long first = static_cast<long long>(blockIdx.x) * tile; first < p.numel;
       first += static_cast<long long>(gridDim.x) * tile) {
    const long long base = first + threadIdx.x;
    hp::load_registers<kE, kS>(p, base, file);
    for (int k = 0; k < p.code; ++k) {
      const hp::ProgramInstr& in = p.instr[k];
      const hp::Reg<kS> d = hp::reg<kE, kS>(file, in.dst);
      const hp::Reg<kS> A = hp::reg<kE, kS>(file, in.a);
      const hp::Reg<kS> B = hp::reg<kE, kS>(file, in.b);
      const hp::Reg<kS> C = hp::reg<kE, kS>(file, in.c);
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
      hp::round_result<kE, kS>(in.round, d);
    }
    hp::store_registers<kE, kS>(p, base, file);
  }
}
)";
    return s.str();
  }();
  return source;
}

namespace {

// The tensor operands an instruction of form `op` reads.
int form_operands(short op) {
  const auto& forms = op_forms();
  HOTPATH_CHECK(op >= 0 && static_cast<std::size_t>(op) < forms.size(), "unknown op form ", op);
  return static_cast<int>(forms[static_cast<std::size_t>(op)].op->tensors.size());
}

}  // namespace

int allocate_registers(hp::Program& p) {
  // Values are numbered as the program builder made them (one per load, cast and instruction);
  // each gets a register for the span from its definition to its last read. Times: 0 the loads,
  // k + 1 instruction k, code + 1 the stores.
  constexpr std::size_t kValues = 256;  // what an unsigned char names
  const int end = p.code + 1;
  std::vector<int> last(kValues, -1);
  auto read = [&](int value, int t) { last[static_cast<std::size_t>(value)] = t; };
  for (int k = 0; k < p.code; ++k) {
    const hp::ProgramInstr& in = p.instr[k];
    const int n = form_operands(in.op);
    const unsigned char operands[] = {in.a, in.b, in.c};
    for (int i = 0; i < n && i < 3; ++i) read(operands[i], k + 1);
  }
  for (int k = 0; k < p.stores; ++k) read(p.store_reg[k], end);
  std::vector<int> phys(kValues, -1);  // value -> register
  std::vector<bool> busy;
  auto take = [&](int value) {
    std::size_t r = 0;
    while (r < busy.size() && busy[r]) ++r;
    if (r == busy.size()) busy.push_back(false);
    busy[r] = true;
    phys[static_cast<std::size_t>(value)] = static_cast<int>(r);
    return static_cast<unsigned char>(r);
  };
  auto release_after = [&](int value, int t) {  // free once its last read (or its write) is at t
    if (last[static_cast<std::size_t>(value)] <= t)
      busy[static_cast<std::size_t>(phys[static_cast<std::size_t>(value)])] = false;
  };
  std::vector<int> loaded(p.load_reg, p.load_reg + p.loads);
  for (int k = 0; k < p.loads; ++k) {
    HOTPATH_CHECK(phys[static_cast<std::size_t>(loaded[k])] < 0, "value ", loaded[k],
                  " is loaded twice");
    p.load_reg[k] = take(loaded[k]);
  }
  for (int value : loaded) release_after(value, 0);  // loaded, and read by nobody
  for (int k = 0; k < p.code; ++k) {
    hp::ProgramInstr& in = p.instr[k];
    const int n = form_operands(in.op);
    unsigned char* operands[] = {&in.a, &in.b, &in.c};
    std::vector<int> values;
    for (int i = 0; i < 3; ++i) {
      if (i >= n) {
        *operands[i] = 0;  // not read: any register
        continue;
      }
      const int value = *operands[i];
      HOTPATH_CHECK(phys[static_cast<std::size_t>(value)] >= 0, "instruction ", k, " reads value ",
                    value, " before it is written");
      *operands[i] = static_cast<unsigned char>(phys[static_cast<std::size_t>(value)]);
      values.push_back(value);
    }
    // Operands read for the last time free their registers before the result takes one: an
    // instruction may write the register it reads (element by element, each read before its
    // write).
    for (int value : values) release_after(value, k + 1);
    const int dst = in.dst;
    HOTPATH_CHECK(phys[static_cast<std::size_t>(dst)] < 0, "value ", dst, " is written twice");
    in.dst = take(dst);
    release_after(dst, k + 1);  // a result nobody reads
  }
  for (int k = 0; k < p.stores; ++k) {
    const int value = p.store_reg[k];
    HOTPATH_CHECK(phys[static_cast<std::size_t>(value)] >= 0, "a store reads value ", value,
                  " that is never written");
    p.store_reg[k] = static_cast<unsigned char>(phys[static_cast<std::size_t>(value)]);
  }
  p.regs = static_cast<int>(busy.size());
  return p.regs;
}

unsigned interpreter_shared_bytes(const hp::Program& p) {
  return static_cast<unsigned>(p.regs) * kInterpreterElements * kInterpreterBlock *
         static_cast<unsigned>(sizeof(float));
}

}  // namespace hotpath::detail
