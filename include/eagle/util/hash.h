// FNV-1a 64 (http://www.isthe.com/chongo/tech/comp/fnv/): the fingerprint of dataset headers, the
// sampler's lengths and the target's weights. Stored fingerprints and the sampler's order depend on
// these exact values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace eagle::util {

constexpr std::uint64_t kFnv1aOffset = 0xcbf29ce484222325ull;
constexpr std::uint64_t kFnv1aPrime = 0x100000001b3ull;

// FNV-1a of n bytes, continuing from h (kFnv1aOffset to start).
inline std::uint64_t fnv1a(const void* data, std::size_t n, std::uint64_t h = kFnv1aOffset) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * kFnv1aPrime;
  return h;
}

constexpr std::uint64_t fnv1a(std::string_view s, std::uint64_t h = kFnv1aOffset) {
  for (char c : s) h = (h ^ static_cast<std::uint8_t>(c)) * kFnv1aPrime;
  return h;
}

// FNV-1a of v's 8 bytes, least significant first (its little-endian bytes on any machine).
constexpr std::uint64_t fnv1a_u64(std::uint64_t v, std::uint64_t h = kFnv1aOffset) {
  for (int b = 0; b < 8; ++b) h = (h ^ ((v >> (8 * b)) & 0xffu)) * kFnv1aPrime;
  return h;
}

}  // namespace eagle::util
