// The vocabulary every part of hotpath shares with its users: the one exception type it throws
// and the log levels. No other header of hotpath's is needed to use them.
#pragma once

#include <stdexcept>

namespace hotpath {

// Every error hotpath raises (bad configuration, a dispatch key that is already taken, ...).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class LogLevel { Trace, Debug, Info, Warn, Error, Off };

}  // namespace hotpath
