// A small seeded random generator for data order (SplitMix64), with its own uniform draw and
// shuffle: std::shuffle and the std distributions differ between standard libraries, and the batch
// order must be the same everywhere a run is resumed.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace eagle::data {

// A uniform draw in [0, 1) from 64 random bits: their top 53 bits as the mantissa (the one rule of
// every uniform draw here: Rng's and the acceptance evaluation's).
inline double uniform_from_bits(std::uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  // An independent stream per (seed, stream), e.g. stream = epoch: resuming needs only the epoch.
  Rng(std::uint64_t seed, std::uint64_t stream) : state_(seed) {
    state_ = next() ^ mix(stream + 0x5851f42d4c957f2dULL);
  }

  std::uint64_t next() {
    state_ += 0x9e3779b97f4a7c15ULL;
    return mix(state_);
  }
  // Uniform in [0, n), n >= 1 (Lemire's multiply-shift with rejection: no modulo bias).
  std::uint64_t uniform(std::uint64_t n) {
    unsigned __int128 m = static_cast<unsigned __int128>(next()) * n;
    auto low = static_cast<std::uint64_t>(m);
    if (low < n) {
      std::uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(next()) * n;
        low = static_cast<std::uint64_t>(m);
      }
    }
    return static_cast<std::uint64_t>(m >> 64);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform_double() { return uniform_from_bits(next()); }

  template <typename T>
  void shuffle(std::vector<T>& v) {
    for (std::size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[uniform(i)]);
  }

 private:
  static std::uint64_t mix(std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  std::uint64_t state_;
};

}  // namespace eagle::data
