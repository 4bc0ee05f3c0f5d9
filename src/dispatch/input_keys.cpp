#include "dispatch/input_keys.h"

#include <c10/util/flat_hash_map.h>
#include <c10/util/intrusive_ptr.h>

namespace hotpath::detail {

// The storages of the parameters this thread's forward passes read (leaves that require grad), to
// see an update through an alias. Weak references: a storage that dies keeps its address taken,
// so a new one cannot be mistaken for it. Bounded: a program that keeps making models starts
// the set again.
namespace {

thread_local ska::flat_hash_map<const c10::StorageImpl*, c10::weak_intrusive_ptr<c10::StorageImpl>>
    tls_param_storages;
constexpr std::size_t kMaxParamStorages = 1 << 16;

}  // namespace

void note_param_storage(const c10::Storage& s) {
  const c10::StorageImpl* key = s.unsafeGetStorageImpl();
  if (tls_param_storages.count(key)) return;
  if (tls_param_storages.size() >= kMaxParamStorages) tls_param_storages.clear();
  tls_param_storages.emplace(key, s.getWeakStorageImpl());
}
bool param_storage(const c10::StorageImpl* s) {
  const auto it = tls_param_storages.find(s);
  return it != tls_param_storages.end() && !it->second.expired();
}

void clear_param_storages() { tls_param_storages.clear(); }

std::uint64_t input_meta_key(const at::TensorBase& t) { return hash_meta(kMetaSeed, nullptr, t); }

}  // namespace hotpath::detail
