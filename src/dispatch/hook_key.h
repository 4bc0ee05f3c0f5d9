// The dispatch key hotpath's hook sits on, and the check that it is free: the one place to change
// for another key or another LibTorch (docs/design.md, "The hook's dispatch key", weighs the
// options).
//
// DispatchKey::Fake is free in LibTorch 2.11 and 2.15: no fallback is registered on it and
// nothing switches it on, and it sits below autograd and autocast (it sees the ops a loop runs,
// forward and backward, after autocast's casts). Upstream is giving it a C++ FakeTensor mode of its
// own (a fallback, and the key switched on in a thread's dispatch while the mode is active).
#pragma once

#include <c10/core/DispatchKey.h>

#include <string>

namespace hotpath::detail {

inline constexpr c10::DispatchKey kHookKey = c10::DispatchKey::Fake;

// The key of the iteration marker (plain_block.h): one operator's calls are counted on it while
// the hook is out of the dispatch. It sits above autograd (it sees the calls the loop makes, fused
// or not, and those kernels make); every other operator falls through it at no cost.
// TESTING_ONLY_GenericMode is free in LibTorch 2.11 and 2.15 (only ATen's own tests register on
// it). The marker is optional: where the key is taken, plain blocks count with RecordFunction.
inline constexpr c10::DispatchKey kMarkKey = c10::DispatchKey::TESTING_ONLY_GenericMode;

// Why the calling thread cannot be hooked through kHookKey, or empty when it can:
// `foreign_fallback`: a fallback that is not hotpath's is registered on the key;
// `included_by_others`: the key is switched on in the thread's dispatch and hotpath did not do it
// (another library's mode: hotpath would intercept ops meant for it).
std::string hook_key_conflict(bool foreign_fallback, bool included_by_others);

}  // namespace hotpath::detail
