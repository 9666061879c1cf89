// Caught exceptions as eagle::Error (see torch_error.h).
#include "eagle/device/torch_error.h"

#include <c10/util/Exception.h>

#include <string>

namespace eagle::device {

Error to_error(std::exception_ptr failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const Error& e) {
    return e;
  } catch (const c10::Error& e) {
    return Error(ErrorKind::internal, std::string("internal error: ") + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return Error(ErrorKind::internal, std::string("internal error: ") + e.what());
  } catch (...) {
    return Error(ErrorKind::internal, "internal error: unknown exception");
  }
}

}  // namespace eagle::device
