// How fuzz_programs judges a program's run under hotpath against eager's: the values compared
// within a tolerance, or within the program's own noise floor (eager on inputs moved by about a
// rounding error). See fuzz_programs.cpp's opening comment.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

namespace fuzz {

struct Outcome {
  std::vector<torch::Tensor> values;  // outputs of the last iteration and the inputs after SGD
  bool threw = false;
  std::string error;
};

// A relative change of the fp32 inputs of about one rounding error; a result hotpath moves by
// at most kNoiseFactor times as much as this moves eager's is within the program's noise.
constexpr double kPerturbation = 1e-7;
constexpr double kNoiseFactor = 10;

// The perturbation for a program's noise floor: one rounding error of the least precise float
// type it computes in (as tests/diff/train_diff does under bf16). Eager rounds every op's fp16 or
// bf16 result; a fused group keeps fp32 between its ops and rounds once, so where a half-precision
// chain cancels (gradients summed in fp16), the two differ by roundings of the larger
// intermediate values, and 1e-7 of the fp32 inputs vanishes in the first cast.
double perturbation(const Outcome& eager);
// Per value: the largest difference between eager and eager on perturbed inputs, over the
// elements finite in both; infinite where the perturbation moves a NaN or an Inf.
std::vector<double> noise_floor(const Outcome& eager, const Outcome& perturbed);
// Empty when the two runs agree, else where they do not. `floor` (per value, from noise_floor)
// widens the tolerance to kNoiseFactor times the program's own noise.
std::string compare(const Outcome& eager, const Outcome& fused, bool exact,
                    const std::vector<double>& floor = {});

}  // namespace fuzz
