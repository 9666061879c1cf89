// Overflow-checked arithmetic for sizes, offsets and counts read from files: a product or sum that
// wraps (a count of 2^62 times 4 bytes is 0) passes every later bounds check and then reads outside
// the file, so each reader computes them through these and refuses a value that does not fit.
#pragma once

#include <optional>

namespace eagle::util {

// a * b, or nullopt when the exact result does not fit in T (signed or unsigned).
template <typename T>
[[nodiscard]] std::optional<T> checked_mul(T a, T b) {
  T r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// a + b, or nullopt when the exact result does not fit in T.
template <typename T>
[[nodiscard]] std::optional<T> checked_add(T a, T b) {
  T r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

}  // namespace eagle::util
