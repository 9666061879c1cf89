// Any exception as the one error type: the one mapping from a caught exception to an eagle::Error
// and so to an exit code, used by main and by the trainer's summary.
#pragma once

#include <exception>

#include "eagle/util/error.h"

namespace eagle::device {

// An eagle::Error as it is; LibTorch's c10::Error (its message without the C++ backtrace) and any
// other exception as ErrorKind::internal, "internal error: <what>".
Error to_error(std::exception_ptr failure);

}  // namespace eagle::device
