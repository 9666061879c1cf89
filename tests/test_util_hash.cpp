// FNV-1a 64 (util/hash.h) against the published test values; stored fingerprints and the sampler's
// order depend on them.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <string>

#include "eagle/util/hash.h"

using namespace eagle;

TEST_CASE("fnv1a of known strings equals the published FNV-1a 64 values", "[util]") {
  CHECK(util::fnv1a(std::string_view("")) == 0xcbf29ce484222325ull);
  CHECK(util::fnv1a(std::string_view("a")) == 0xaf63dc4c8601ec8cull);
  CHECK(util::fnv1a(std::string_view("foobar")) == 0x85944171f73967e8ull);
  const std::string foobar = "foobar";
  CHECK(util::fnv1a(foobar.data(), foobar.size()) == 0x85944171f73967e8ull);
  // Continuing from a hash is hashing the concatenation.
  CHECK(util::fnv1a(std::string_view("bar"), util::fnv1a(std::string_view("foo"))) == 0x85944171f73967e8ull);
}

TEST_CASE("fnv1a_u64 hashes the little-endian bytes of a value", "[util]") {
  const std::int64_t values[] = {5, -1};
  unsigned char bytes[16];
  for (int i = 0; i < 2; ++i)
    for (int b = 0; b < 8; ++b)
      bytes[8 * i + b] = static_cast<unsigned char>(static_cast<std::uint64_t>(values[i]) >> (8 * b));
  std::uint64_t h = util::kFnv1aOffset;
  for (auto v : values) h = util::fnv1a_u64(static_cast<std::uint64_t>(v), h);
  CHECK(h == util::fnv1a(bytes, sizeof bytes));
  CHECK(h == 0x3592ce4fca669f98ull);  // the sampler's lengths fingerprint of {5, -1}
}
