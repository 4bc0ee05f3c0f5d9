// What the hook reads from the dispatcher's schemas (dispatch/op_facts.h).
#include <ATen/core/dispatch/Dispatcher.h>

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "dispatch/op_facts.h"

namespace {

const c10::FunctionSchema& schema(const char* name, const char* overload = "") {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, overload).schema();
}

// The arguments written, by name.
std::vector<std::string> written(const c10::FunctionSchema& s) {
  const std::vector<bool> w = hotpath::detail::written_arguments(s);
  REQUIRE(w.size() == s.arguments().size());
  std::vector<std::string> names;
  for (std::size_t i = 0; i < w.size(); ++i)
    if (w[i]) names.push_back(s.arguments()[i].name());
  return names;
}

}  // namespace

TEST_CASE("an op writes the arguments its schema annotates as written", "[hook]") {
  CHECK(written(schema("aten::add_", "Tensor")) == std::vector<std::string>{"self"});
  CHECK(written(schema("aten::add", "Tensor")).empty());
  CHECK(written(schema("aten::add", "out")) == std::vector<std::string>{"out"});
  CHECK(written(schema("aten::_native_batch_norm_legit", "")) ==
        std::vector<std::string>{"running_mean", "running_var"});
}

TEST_CASE("a batch norm writes its running statistics though its schema does not say so",
          "[hook]") {
  // A GPU run once replayed a convnet whose statistics a graph updated through copies: they ended
  // 0.11 away from eager's where the noise floor was 0.005. These schemas must still name the
  // statistics as the hook looks for them.
  const std::vector<std::string> stats{"running_mean", "running_var"};
  for (const char* op :
       {"aten::native_batch_norm", "aten::cudnn_batch_norm", "aten::miopen_batch_norm",
        "aten::batch_norm_update_stats", "aten::batch_norm_gather_stats",
        "aten::batch_norm_gather_stats_with_counts"}) {
    CAPTURE(op);
    const c10::FunctionSchema& s = schema(op);
    for (const auto& a : s.arguments())  // unannotated: the hook's own word is what marks them
      if (a.name() == "running_mean") CHECK(a.alias_info() == nullptr);
    CHECK(written(s) == stats);
  }
  // Their out= forms write their outputs and the statistics; the backward only reads them.
  CHECK(written(schema("aten::cudnn_batch_norm", "out")) ==
        std::vector<std::string>{"running_mean", "running_var", "out0", "out1", "out2", "out3"});
  CHECK(written(schema("aten::native_batch_norm_backward", "")).empty());
}

TEST_CASE("a view's start is a position, a Scalar is a run-time value", "[hook]") {
  using hotpath::detail::is_position_argument;
  using hotpath::detail::is_scalar_type;
  const auto arg = [](const c10::FunctionSchema& s, const char* name) -> const c10::Argument& {
    return s.arguments().at(static_cast<std::size_t>(*s.argumentIndexWithName(name)));
  };
  const c10::FunctionSchema& slice = schema("aten::slice", "Tensor");
  CHECK(is_position_argument(slice, arg(slice, "start")));
  CHECK(is_position_argument(slice, arg(slice, "end")));
  CHECK_FALSE(is_position_argument(slice, arg(slice, "step")));
  const c10::FunctionSchema& sum = schema("aten::sum", "dim_IntList");
  CHECK_FALSE(is_position_argument(sum, arg(sum, "dim")));
  const c10::FunctionSchema& add = schema("aten::add", "Tensor");
  CHECK(is_scalar_type(arg(add, "alpha").type()));
  CHECK_FALSE(is_scalar_type(arg(add, "other").type()));
  const c10::FunctionSchema& clamp = schema("aten::clamp", "");
  CHECK(is_scalar_type(arg(clamp, "min").type()));  // Scalar?
}
