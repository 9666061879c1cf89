// Fuzzing a file reader: each case must end in success or an eagle::Error, never a crash or
// another exception. Mutations are deterministic (a fixed seed), so a failing case reproduces.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "eagle/util/error.h"

namespace eagle::test {

// Values that break size arithmetic: wrap a product (2^62 x 4 = 0), an add (2^64 - 1 + 1), a
// signed cast (2^63), or sit just past a bound.
inline const std::vector<std::uint64_t>& adversarial_values() {
  static const std::vector<std::uint64_t> v = {0,
                                               1,
                                               0x7fffffffull,
                                               0xffffffffull,
                                               0x100000000ull,
                                               std::uint64_t{1} << 61,
                                               std::uint64_t{1} << 62,
                                               (std::uint64_t{1} << 62) + 1,
                                               std::uint64_t{1} << 63,
                                               ~std::uint64_t{0} >> 1,
                                               ~std::uint64_t{0}};
  return v;
}

// Runs the reader on one case: counts the outcomes, fails on anything but success or Error.
struct FuzzCounts {
  int ok = 0, refused = 0;
  void run(const std::string& what, const std::function<void()>& reader) {
    try {
      reader();
      ++ok;
    } catch (const Error&) {
      ++refused;
    } catch (const std::exception& e) {
      FAIL_CHECK(what << ": an exception other than eagle::Error: " << e.what());
    }
  }
};

// Writes v's low `width` bytes little-endian at pos (inside s).
inline void put_le(std::string& s, std::size_t pos, std::uint64_t v, std::size_t width) {
  for (std::size_t i = 0; i < width && pos + i < s.size(); ++i) s[pos + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

// A copy of s with 1 to 8 random bytes replaced, then cut to a random length one case in eight.
inline std::string random_mutation(const std::string& s, std::mt19937_64& rng) {
  std::string out = s;
  const int n = 1 + static_cast<int>(rng() % 8);
  for (int k = 0; k < n && !out.empty(); ++k) out[rng() % out.size()] = static_cast<char>(rng() & 0xff);
  if (rng() % 8 == 0 && !out.empty()) out.resize(rng() % out.size());
  return out;
}

}  // namespace eagle::test
