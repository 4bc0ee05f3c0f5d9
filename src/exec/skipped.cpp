// Values a fused kernel skipped (PlanGroup::speculative): what computes each one if the program
// needs it after all (speculate), and computing them then (restore_read, restore_unwritten; for
// an op of a step's tail on the light lane, tail_op); outputs whose own tensor died while their
// storage lives (revive).
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <map>

#include "common/error.h"
#include "common/log.h"
#include "dispatch/hook_key.h"
#include "exec/executor.h"
#include "exec/output_slot.h"

namespace hotpath::detail {

void Executor::revive(Deferred& d) const {
  if (armed_ == nullptr) return;  // nothing is deferred between plans
  for (std::size_t k = 0; k < d.stores.size() && d.out_alias < 0; ++k) {
    if (!d.made[k].expired()) continue;
    c10::intrusive_ptr<c10::StorageImpl> storage = d.stores[k].lock();
    if (!storage) continue;  // nobody reads it: nothing to write
    const TensorMeta& m = armed_->ops[static_cast<std::size_t>(d.index)].outs[k];
    d.revived.push_back(tensor_on(c10::Storage(std::move(storage)), m.dtype, m.sizes, m.strides));
    d.made[k] = WeakTensor(d.revived.back().getIntrusivePtr());
  }
}

void Executor::speculate(const at::Tensor& t, const PlanGroup& g, std::size_t arg,
                         const std::vector<Deferred*>& members) {
  Unwritten u{WeakTensor(t.getIntrusivePtr())};
  u.group = g.name;
  u.plan = armed_;
  u.epoch = iteration_;
  std::map<const c10::TensorImpl*, int> slot_of;  // tensors the cone makes
  for (int m : g.cone[arg]) {
    const Deferred& d = *members[static_cast<std::size_t>(m)];
    ConeOp c{d.op, d.keys, std::vector<c10::IValue>(d.args.begin(), d.args.end()), {}, {}};
    for (std::size_t k = 0; k < c.args.size(); ++k) {
      if (!c.args[k].isTensor() || !c.args[k].toTensor().defined()) continue;
      const at::Tensor& in = c.args[k].toTensor();
      const auto it = slot_of.find(in.unsafeGetTensorImpl());
      if (it != slot_of.end()) {
        c.made.emplace_back(k, it->second);
        c.args[k] = c10::IValue();
      } else {
        u.versions.emplace_back(in, in._version());
      }
    }
    if (d.out_alias < 0) {
      for (std::size_t k = 0; k < d.made.size(); ++k) {
        c.out_slots.push_back(u.slots++);
        if (const at::Tensor out = d.output(k); out.defined())
          slot_of[out.unsafeGetTensorImpl()] = c.out_slots.back();
      }
    }
    u.cone.push_back(std::move(c));
  }
  const auto it = slot_of.find(t.unsafeGetTensorImpl());
  HOTPATH_CHECK(it != slot_of.end(), "the members of group ", g.name,
                " that compute a skipped value do not make it");
  u.target_slot = it->second;
  unwritten_.push_back(std::move(u));
}

void Executor::restore_read(const torch::jit::Stack& stack, std::size_t nargs) {
  for (std::size_t k = stack.size() - nargs; k < stack.size(); ++k) {
    const c10::IValue& a = stack[k];
    auto reads = [&](const at::Tensor& t) {
      if (!t.defined()) return false;
      for (const Unwritten& u : unwritten_) {
        if (!u.target.expired() &&
            at::Tensor(u.target.lock()).unsafeGetTensorImpl() == t.unsafeGetTensorImpl())
          return true;
      }
      return false;
    };
    bool hit = a.isTensor() && reads(a.toTensor());
    if (!hit && a.isTensorList())
      for (const at::Tensor& t : a.toTensorList().vec()) hit = hit || reads(t);
    if (hit) {
      restore_unwritten(true);
      return;
    }
  }
}

bool Executor::tail_op(torch::jit::Stack* stack, std::size_t nargs) {
  std::lock_guard<std::mutex> lock(mu_);
  if (armed_ || !tail_.load(std::memory_order_relaxed)) return false;
  if (!unwritten_.empty()) restore_read(*stack, nargs);  // as intercept does between plans
  return true;
}

void Executor::restore_unwritten(bool all) {
  for (auto it = unwritten_.begin(); it != unwritten_.end();) {
    if (!all && it->epoch >= iteration_) {
      ++it;
      continue;
    }
    at::Tensor target(it->target.lock());
    if (target.defined()) {
      for (const auto& [in, version] : it->versions) {
        HOTPATH_CHECK(in._version() == version, "a value of fused group ", it->group,
                      " that the recorded iterations never kept is needed after all, and its "
                      "inputs have changed since; it cannot be restored. Disable fusion for this "
                      "loop (HOTPATH_FUSE=0) and report the loop.");
      }
      c10::impl::ExcludeDispatchKeyGuard no_hook(kHookKey);
      at::AutoDispatchBelowADInplaceOrView below;
      std::vector<at::Tensor> slots(static_cast<std::size_t>(it->slots));
      for (const ConeOp& c : it->cone) {
        torch::jit::Stack s(c.args.begin(), c.args.end());
        for (const auto& [k, slot] : c.made) s[k] = slots[static_cast<std::size_t>(slot)];
        c.op.redispatchBoxed(c.keys, &s);
        for (std::size_t k = 0; k < c.out_slots.size(); ++k)
          slots[static_cast<std::size_t>(c.out_slots[k])] = s.at(k).toTensor();
      }
      adopt_result(target, slots[static_cast<std::size_t>(it->target_slot)]);
      ++it->plan->restored;
      log_debug(concat("hotpath: restored a skipped value of group ", it->group));
    }
    it = unwritten_.erase(it);
  }
}

}  // namespace hotpath::detail
