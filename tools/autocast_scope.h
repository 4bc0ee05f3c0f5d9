// For the harness and benchmark programs: bf16 autocast over a scope (a forward pass), as a user
// would write it in LibTorch; off when `on` is false.
#pragma once

#include <ATen/autocast_mode.h>

namespace hotpath_tools {

class Autocast {
 public:
  Autocast(bool on, c10::DeviceType device) : on_(on), device_(device) {
    if (!on_) return;
    at::autocast::set_autocast_dtype(device_, at::kBFloat16);
    at::autocast::set_autocast_enabled(device_, true);
    at::autocast::increment_nesting();
  }
  ~Autocast() {
    if (!on_) return;
    at::autocast::set_autocast_enabled(device_, false);
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  }
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  bool on_;
  c10::DeviceType device_;
};

}  // namespace hotpath_tools
