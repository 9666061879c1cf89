// safetensors reader and writer: round trip of every dtype, the on-disk layout, the private
// mapping, and the validation errors for malformed files.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "eagle/model/safetensors.h"
#include "eagle/util/error.h"
#include "fuzz_helpers.h"
#include "helpers.h"

using namespace eagle;
using eagle::model::SafetensorsFile;

namespace {

// A raw file: 8-byte little-endian header length, the header text, then data bytes.
void write_raw(const std::filesystem::path& p, const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  test::write_file(p, out + header + data);
}

// Opens p and returns the error text; fails the test when no error is thrown.
std::string open_error(const std::filesystem::path& p) {
  try {
    SafetensorsFile::open(p.string());
  } catch (const Error& e) {
    return e.format();
  }
  FAIL("no error for " << p);
  return "";
}

}  // namespace

TEST_CASE("safetensors round trip of every dtype with metadata", "[model]") {
  test::TempDir dir;
  std::map<std::string, torch::Tensor> t;
  t["f32"] = torch::tensor({1.5f, -2.0f, 3.25f});
  t["bf16"] = torch::tensor({0.5f, 1.0f, -7.0f, 8.0f}).to(torch::kBFloat16).view({2, 2});
  t["f16"] = torch::tensor({0.25f, 100.0f}).to(torch::kFloat16);
  t["i64"] = torch::tensor({std::int64_t{-1}, std::int64_t{1} << 40, std::int64_t{7}});
  t["i32"] = torch::tensor({-5, 6}, torch::kInt32);
  t["bool"] = torch::tensor({true, false, true});
  t["u8"] = torch::tensor({0, 200, 255}, torch::kUInt8);
  t["scalar"] = torch::tensor(4.0f);
  t["empty"] = torch::zeros({0, 3});
  t["strided"] = torch::arange(12, torch::kFloat32).view({3, 4}).t();  // non-contiguous input
  auto path = (dir / "x.safetensors").string();
  model::save_safetensors(path, t, {{"format", "pt"}, {"note", "round trip"}});

  auto f = SafetensorsFile::open(path);
  CHECK(f.names().size() == t.size());
  CHECK(f.metadata().at("format") == "pt");
  CHECK(f.metadata().at("note") == "round trip");
  for (const auto& [name, ref] : t) {
    INFO(name);
    auto got = f.get(name);
    CHECK(got.scalar_type() == ref.scalar_type());
    CHECK(got.sizes() == ref.sizes());
    CHECK(f.shape(name) == ref.sizes().vec());
    CHECK(f.dtype(name) == ref.scalar_type());
    CHECK(torch::equal(got, ref));
  }
  CHECK(f.contains("f32"));
  CHECK_FALSE(f.contains("nope"));
  // No temporary file is left beside the output.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) files += e.is_regular_file();
  CHECK(files == 1);
}

TEST_CASE("safetensors writer: padded header, sorted contiguous offsets", "[model]") {
  test::TempDir dir;
  auto path = (dir / "y.safetensors").string();
  model::save_safetensors(path, {{"b", torch::ones({3}, torch::kInt8).to(torch::kUInt8)},
                                 {"a", torch::ones({2}, torch::kFloat16)},
                                 {"c", torch::ones({1}, torch::kInt64)}});
  auto raw = test::read_file(path);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(raw[i]);
  CHECK(n % 8 == 0);
  CHECK(raw.size() == 8 + n + 3 + 4 + 8);
  auto h = nlohmann::json::parse(raw.substr(8, n));
  CHECK(h["a"]["data_offsets"] == nlohmann::json::array({0, 4}));
  CHECK(h["b"]["data_offsets"] == nlohmann::json::array({4, 7}));
  CHECK(h["c"]["data_offsets"] == nlohmann::json::array({7, 15}));
  CHECK(h["b"]["dtype"] == "U8");
}

TEST_CASE("safetensors tensors are zero-copy views of a private mapping", "[model]") {
  test::TempDir dir;
  auto path = (dir / "z.safetensors").string();
  model::save_safetensors(path, {{"w", torch::arange(8, torch::kFloat32)}});
  const auto before = test::read_file(path);
  torch::Tensor w;
  {
    auto f = SafetensorsFile::open(path);
    auto a = f.get("w");
    auto b = f.get("w");
    CHECK(a.data_ptr() == b.data_ptr());  // both view the mapping, no copy
    w = a;
  }  // the file object is gone; the tensor keeps the mapping alive
  CHECK(w[3].item<float>() == 3.0f);
  w.mul_(2);  // copy-on-write: changes this process's pages only
  CHECK(w[3].item<float>() == 6.0f);
  CHECK(test::read_file(path) == before);
  CHECK(torch::equal(model::load_safetensors(path).at("w"), torch::arange(8, torch::kFloat32)));
}

TEST_CASE("safetensors validation names the file, tensor and problem", "[model]") {
  test::TempDir dir;
  const std::string data8(8, '\0');
  auto p = dir / "bad.safetensors";

  SECTION("shorter than 8 bytes") {
    test::write_file(p, "abc");
    CHECK_THAT(open_error(p), Catch::Contains("bad.safetensors") && Catch::Contains("shorter than"));
  }
  SECTION("header length beyond the file") {
    write_raw(p, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data8);
    std::string raw = test::read_file(p);
    raw.resize(20);  // truncated inside the header
    test::write_file(p, raw);
    CHECK_THAT(open_error(p), Catch::Contains("header length") && Catch::Contains("truncated"));
  }
  SECTION("a tensor named twice in the header (a parser keeps one silently; issue 53 L6)") {
    write_raw(p,
              R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"w":{"dtype":"F32","shape":[2],)"
              R"("data_offsets":[0,8]}})",
              data8);
    CHECK_THAT(open_error(p),
               Catch::Contains("bad.safetensors") && Catch::Contains("named twice") && Catch::Contains("key \"w\""));
  }
  SECTION("header is not JSON") {
    write_raw(p, "{not json", data8);
    CHECK_THAT(open_error(p), Catch::Contains("not valid JSON"));
  }
  SECTION("data cut short") {
    write_raw(p, R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", data8);
    CHECK_THAT(open_error(p), Catch::Contains("tensor \"w\"") && Catch::Contains("outside the data section"));
  }
  SECTION("shape x dtype != byte length") {
    write_raw(p, R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data8);
    CHECK_THAT(open_error(p), Catch::Contains("tensor \"w\"") && Catch::Contains("expected 12 bytes") &&
                                  Catch::Contains("found 8 bytes"));
  }
  SECTION("overlap") {
    write_raw(p,
              R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
              R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
              data8);
    CHECK_THAT(open_error(p), Catch::Contains("overlaps"));
  }
  SECTION("unknown dtype") {
    write_raw(p, R"({"w":{"dtype":"F8_E9","shape":[8],"data_offsets":[0,8]}})", data8);
    CHECK_THAT(open_error(p), Catch::Contains("tensor \"w\"") && Catch::Contains("unsupported dtype") &&
                                  Catch::Contains("F8_E9"));
  }
  SECTION("negative shape") {
    write_raw(p, R"({"w":{"dtype":"U8","shape":[-8],"data_offsets":[0,8]}})", data8);
    CHECK_THAT(open_error(p), Catch::Contains("non-negative"));
  }
  SECTION("missing tensor on get") {
    write_raw(p, R"({"w":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", data8);
    auto f = SafetensorsFile::open(p.string());
    CHECK_THROWS_WITH(f.get("v"), Catch::Contains("tensor \"v\"") && Catch::Contains("missing"));
  }
  SECTION("missing file") {
    CHECK_THAT(open_error(dir / "nope.safetensors"), Catch::Contains("nope.safetensors") && Catch::Contains("not found"));
  }
}

TEST_CASE("safetensors unaligned offsets from other writers are read correctly", "[model]") {
  test::TempDir dir;
  auto p = dir / "odd.safetensors";
  float v = 2.5f;
  std::string data(1, 'x');
  data.append(reinterpret_cast<const char*>(&v), 4);
  write_raw(p, R"({"pad":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
               R"("v":{"dtype":"F32","shape":[1],"data_offsets":[1,5]}})",
            data);
  auto f = SafetensorsFile::open(p.string());
  CHECK(f.get("v").item<float>() == 2.5f);
}

TEST_CASE("zero-size tensors may share an offset, also with a tensor that starts there", "[model]") {
  test::TempDir dir;
  auto p = dir / "empty.safetensors";
  // What the Python library writes for two empty tensors next to a real one.
  write_raw(p,
            R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"b":{"dtype":"F32","shape":[2],)"
            R"("data_offsets":[0,8]},"c":{"dtype":"F32","shape":[0,3],"data_offsets":[0,0]}})",
            std::string(8, '\0'));
  auto f = SafetensorsFile::open(p.string());
  CHECK(f.get("a").numel() == 0);
  CHECK(f.get("c").sizes() == torch::IntArrayRef({0, 3}));
  CHECK(f.get("b").numel() == 2);
  // Real overlaps are still refused.
  write_raw(p,
            R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"y":{"dtype":"F32","shape":[1],)"
            R"("data_offsets":[4,8]}})",
            std::string(8, '\0'));
  CHECK_THAT(open_error(p), Catch::Contains("overlaps"));
}

namespace {

// Opens the file and copies every tensor, so a size check that let a bad shape through reads
// outside the mapping here (a crash) instead of passing.
void open_and_copy(const std::string& path) {
  const auto f = SafetensorsFile::open(path);
  for (const auto& n : f.names()) CHECK(f.get(n).clone().numel() >= 0);
}

}  // namespace

TEST_CASE("fuzzed safetensors headers are read or refused, never read outside the file", "[model]") {
  test::TempDir dir;
  const auto path = (dir / "fuzz.safetensors").string();
  test::FuzzCounts counts;
  std::mt19937_64 rng(27);
  const std::vector<std::string> dtypes = {"F32", "BF16", "F16", "F64", "I64", "I32", "I8", "BOOL", "X9", ""};
  auto any_value = [&]() -> nlohmann::json {
    const auto& adv = test::adversarial_values();
    switch (rng() % 6) {
      case 0:
        return adv[rng() % adv.size()];
      case 1:
        return -static_cast<std::int64_t>(rng() % 4);
      case 2:
        return 0.5;
      case 3:
        return "7";
      default:
        return rng() % 40;
    }
  };
  // Headers made up field by field: shapes and offsets of any size, sign or type ([2^61] F64 is
  // 2^64 bytes, which wrapped to 0 and matched empty data_offsets).
  for (int i = 0; i < 2000; ++i) {
    nlohmann::json h = nlohmann::json::object();
    const int tensors = 1 + static_cast<int>(rng() % 3);
    for (int t = 0; t < tensors; ++t) {
      nlohmann::json shape = nlohmann::json::array();
      for (std::uint64_t d = rng() % 4; d > 0; --d) shape.push_back(any_value());
      nlohmann::json offsets = {rng() % 2 ? nlohmann::json(rng() % 64) : any_value(),
                                rng() % 2 ? nlohmann::json(rng() % 128) : any_value()};
      h["t" + std::to_string(t)] = {
          {"dtype", dtypes[rng() % dtypes.size()]}, {"shape", shape}, {"data_offsets", offsets}};
    }
    write_raw(path, h.dump(), std::string(rng() % 128, '\x01'));
    counts.run(h.dump(), [&] { open_and_copy(path); });
  }
  // Random bytes of a valid file, header length included.
  std::map<std::string, torch::Tensor> t;
  t["a"] = torch::arange(24, torch::kFloat32).view({2, 3, 4});
  t["b"] = torch::ones({5}, torch::kInt64);
  model::save_safetensors(path, t, {{"format", "pt"}});
  const std::string good = test::read_file(path);
  for (int i = 0; i < 1000; ++i) {
    test::write_file(path, test::random_mutation(good, rng));
    counts.run(fmt::format("random case {}", i), [&] { open_and_copy(path); });
  }
  CHECK(counts.ok > 0);
  CHECK(counts.refused > 1000);
}

TEST_CASE("a safetensors shape whose byte count wraps 64 bits is refused", "[model]") {
  test::TempDir dir;
  const auto p = dir / "wrap.safetensors";
  write_raw(p, R"({"x":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0]}})", "");
  CHECK_THAT(open_error(p), Catch::Contains("shape overflows") && Catch::Contains("tensor \"x\""));
  write_raw(p, R"({"x":{"dtype":"F32","shape":[0,18446744073709551615],"data_offsets":[0,0]}})", "");
  CHECK_THAT(open_error(p), Catch::Contains("shape overflows"));
}
