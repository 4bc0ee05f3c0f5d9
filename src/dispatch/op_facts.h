// What an op's schema says about its arguments, as the hook reads it once per operator
// (dispatch_hook.cpp's OpInfo): which are run-time scalars, which only say where a view starts,
// and which the op writes in place.
#pragma once

#include <ATen/core/function_schema.h>

#include <vector>

namespace hotpath::detail {

// A Scalar or float argument (optional or not): its value is a run-time parameter of the op.
bool is_scalar_type(const c10::TypePtr& type);

// An integer that only says where a view starts (slice's start and end, select's index, ...): a
// batch sliced at another place each step is the same op (the view's sizes and strides, which are
// hashed, say all a kernel needs); views run eagerly with their real arguments.
bool is_position_argument(const c10::FunctionSchema& schema, const c10::Argument& a);

// Per argument: whether the op writes it in place. Its alias annotation says so (Tensor(a!)),
// and for the batch norms' running statistics, which they update in place (`training` true)
// under a schema that calls them read-only, the hook says so instead: a replay that took them
// for read-only inputs would update a copy of them.
std::vector<bool> written_arguments(const c10::FunctionSchema& schema);

}  // namespace hotpath::detail
