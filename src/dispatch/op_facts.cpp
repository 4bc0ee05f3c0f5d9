#include "dispatch/op_facts.h"

#include <string>

namespace hotpath::detail {
namespace {

// An argument the op writes in place though its schema does not say so: the batch norms' running
// statistics (updated where `training` is true; SyncBatchNorm's gathers and the update of the
// statistics alone always update them). Their schemas predate the annotation.
bool written_unannotated(const c10::FunctionSchema& schema, const c10::Argument& a) {
  static const char* const kBatchNorms[] = {
      "aten::native_batch_norm",       "aten::cudnn_batch_norm",
      "aten::miopen_batch_norm",       "aten::batch_norm_update_stats",
      "aten::batch_norm_gather_stats", "aten::batch_norm_gather_stats_with_counts"};
  if (a.name() != "running_mean" && a.name() != "running_var") return false;
  for (const char* b : kBatchNorms)
    if (schema.name() == b) return true;
  return false;
}

}  // namespace

bool is_scalar_type(const c10::TypePtr& type) {
  c10::TypePtr t = type;
  if (t->kind() == c10::TypeKind::OptionalType)
    t = t->castRaw<c10::OptionalType>()->getElementType();
  const auto k = t->kind();
  return k == c10::TypeKind::NumberType || k == c10::TypeKind::FloatType ||
         k == c10::TypeKind::ComplexType;
}

bool is_position_argument(const c10::FunctionSchema& schema, const c10::Argument& a) {
  static const char* const kViews[] = {
      "aten::slice",         "aten::select",         "aten::narrow",     "aten::as_strided",
      "aten::slice_scatter", "aten::select_scatter", "aten::narrow_copy"};
  const std::string& n = a.name();
  if (n != "start" && n != "end" && n != "index" && n != "storage_offset") return false;
  for (const char* v : kViews)
    if (schema.name() == v) return true;
  return false;
}

std::vector<bool> written_arguments(const c10::FunctionSchema& schema) {
  std::vector<bool> written;
  for (const auto& a : schema.arguments())
    written.push_back((a.alias_info() != nullptr && a.alias_info()->isWrite()) ||
                      written_unannotated(schema, a));
  return written;
}

}  // namespace hotpath::detail
