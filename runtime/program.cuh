// The interpreter kernel's program: a fusion group as bytecode, run element by element by one
// kernel that is compiled once per device (codegen/interpreter.cpp), while the group's own kernel
// compiles. Plain data, included by the host library and by NVRTC alike: one definition of the
// layout that both sides read.
#pragma once

namespace hp {

constexpr int kProgramSlots = 64;  // kernel arguments: tensors and scalars share the numbering
constexpr int kProgramIo = 24;     // loads, and stores
constexpr int kProgramCode = 64;   // instructions
constexpr int kProgramRegs = kProgramIo + kProgramCode;  // values, before registers are reused
// Registers of the interpreter's register file (in shared memory) a program may use at once.
constexpr int kProgramFile = 24;

// Storage types of tensor slots, and the rounding of an instruction's result.
enum ProgramType : unsigned char { kF32 = 0, kF16 = 1, kBF16 = 2, kBool = 3 };

struct ProgramInstr {
  short op;               // the form's index in the op table (fusion/op_table.h)
  unsigned char dst;      // register written
  unsigned char a, b, c;  // registers read (tensor operands, in emitter order; the form's count)
  unsigned char s0, s1;   // scalar slots read
  unsigned char round;    // ProgramType the result is rounded to (kF32: none)
  float imm;              // the form's immediate constant, if it has one
};

struct Program {
  void* ptr[kProgramSlots];  // tensor slots; nullptr: a value nobody reads, not stored
  float scalar[kProgramSlots];
  unsigned char type[kProgramSlots];    // ProgramType of tensor slots
  unsigned char single[kProgramSlots];  // one element, broadcast (else linear in the domain)
  int loads, code, stores;
  int regs;  // registers used (at most kProgramFile): the register file's size
  unsigned char load_slot[kProgramIo], load_reg[kProgramIo];
  unsigned char store_slot[kProgramIo], store_reg[kProgramIo];
  ProgramInstr instr[kProgramCode];
  long long numel;
};

}  // namespace hp
