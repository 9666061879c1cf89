// Feature stores read back: a dump's shards range-checked when opened (target_argmax inside the
// vocabulary), its manifest's last_hidden (before or after the final norm) read back and a read
// without aux features, NaN or Inf refused by shard, tensor, sample and position when read, fuzzed shards
// read or refused, never read outside; a speculators folder's hidden-state headers checked when it
// is opened and its NaN named by file.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "data_helpers.h"
#include "eagle/data/speculators_folder.h"
#include "eagle/features/store.h"
#include "eagle/model/safetensors.h"
#include "eagle/util/error.h"
#include "fuzz_helpers.h"
#include "helpers.h"

using namespace eagle;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kVocab = 16, kHidden = 4, kAux = 3 * kHidden;

// A folder of one train shard: two samples of 3 and 4 tokens, float32 features.
struct TinyStore {
  fs::path dir;
  features::FeatureManifest manifest;
  data::Dataset train;
  std::map<std::string, torch::Tensor> tensors;
};

TinyStore tiny_store(const fs::path& dir) {
  TinyStore s;
  s.dir = dir;
  s.train = data::Dataset::from_samples({{{1, 2, 3}, {0, 1, 1}}, {{4, 5, 6, 7}, {0, 0, 1, 1}}});
  s.manifest.layout = {kAux, kHidden, torch::kFloat32, false, true};
  s.manifest.aux_layer_ids = {1, 2, 3};
  s.manifest.target = {{"num_hidden_layers", 4}};
  s.manifest.shards = {{"train", 0, 0, 2, 7, "features/train-00000.safetensors"}};
  s.manifest.complete = true;
  s.tensors["aux_hidden"] = torch::arange(7 * kAux, torch::kFloat32).view({7, kAux});
  s.tensors["last_hidden"] = torch::arange(7 * kHidden, torch::kFloat32).view({7, kHidden});
  s.tensors["target_argmax"] = torch::tensor({1, 2, 3, 4, 5, 6, 15}, torch::kInt32);
  s.tensors["sample_offsets"] = torch::tensor({0, 3, 7}, torch::kInt64);
  fs::create_directories(dir / "features");
  features::write_shard(dir.string(), s.manifest.shards[0], s.tensors);
  return s;
}

std::shared_ptr<const features::FeatureStore> open(const TinyStore& s) {
  return features::open_dumped_features(s.dir.string(), s.manifest, s.train, nullptr, kVocab);
}

// Reads every token of every sample, so a check that let a bad shard through reads outside it.
void read_all(const features::FeatureStore& store, const data::Dataset& ds) {
  const auto& l = store.layout();
  for (std::size_t i = 0; i < ds.size(); ++i) {
    const auto n = ds.length(i);
    std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
    for (std::int64_t p = 0; p < n; ++p) ids[static_cast<std::size_t>(p)] = static_cast<std::int32_t>(ds.token(i, p));
    std::vector<float> aux(static_cast<std::size_t>(n * std::max<std::int64_t>(l.aux_width, 1)));
    std::vector<float> last(static_cast<std::size_t>(n * l.hidden_size));
    std::vector<std::int64_t> argmax(static_cast<std::size_t>(n));
    store.read(static_cast<std::int64_t>(i), 0, n, ids.data(), aux.data(), last.data(), argmax.data());
  }
}

std::string open_error(const TinyStore& s) {
  try {
    read_all(*open(s), s.train);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::input);
    return e.format();
  }
  FAIL("the store was read without an error");
  return "";
}

}  // namespace

TEST_CASE("a stored target_argmax outside the vocabulary is refused when its shard is opened", "[features]") {
  test::TempDir tmp;
  auto s = tiny_store(tmp.path());
  std::vector<std::int64_t> got(7);
  {
    auto store = open(s);
    std::vector<float> aux(4 * kAux), last(4 * kHidden);
    std::vector<std::int32_t> ids{4, 5, 6, 7};
    store->read(1, 0, 4, ids.data(), aux.data(), last.data(), got.data());
    CHECK(got[3] == 15);  // vocab - 1 is a token
    CHECK(last[0] == 3 * kHidden);
  }
  for (const int bad : {16, -1, std::numeric_limits<int>::min()}) {
    INFO(bad);
    s.tensors["target_argmax"] = torch::tensor({1, 2, 3, 4, bad, 6, 7}, torch::kInt32);
    features::write_shard(s.dir.string(), s.manifest.shards[0], s.tensors);
    try {
      open(s);  // opening alone refuses it, before any batch
      FAIL("an argmax outside [0, vocab) was accepted");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::input);
      CHECK_THAT(e.format(), Catch::Contains("train-00000.safetensors") && Catch::Contains("target_argmax\"[4]") &&
                                 Catch::Contains("sample 1 of split train, position 1") && Catch::Contains("[0, 16)") &&
                                 Catch::Contains(std::to_string(bad)));
    }
  }
}

TEST_CASE("a features manifest with other than EAGLE-3's 3 aux ids is refused by name", "[features]") {
  test::TempDir tmp;
  auto s = tiny_store(tmp.path());
  auto with = [&](std::vector<std::int64_t> ids, std::int64_t aux_width) {
    auto m = s.manifest;
    m.aux_layer_ids = std::move(ids);
    m.layout.aux_width = aux_width;
    test::write_file(tmp / features::kFeaturesManifest, features::to_json(m).dump());
    return features::read_manifest(tmp.path().string());
  };
  CHECK(with({1, 2, 3}, kAux).aux_layer_ids.size() == 3);
  CHECK(with({}, 0).aux_layer_ids.empty());  // EAGLE-1: no aux features
  for (const auto& [ids, width] : std::vector<std::pair<std::vector<std::int64_t>, std::int64_t>>{
           {{0, 1, 2, 3, 4}, 5 * kHidden},  // 5 ids with a matching width: bypassed the 3-id rule
           {{1, 2}, 2 * kHidden},
           {{1, 2, 3}, 2 * kHidden},  // aux_width of another count
           {{3, 2, 1}, kAux},         // not low -> high
           {{-1, 2, 3}, kAux},
           {{1, 2, 5}, kAux},  // past the target's 4 layers
           {{1, 2, 3}, 0}}) {
    INFO(fmt::format("[{}] width {}", fmt::join(ids, ", "), width));
    try {
      with(ids, width);
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::input);
      CHECK_THAT(e.format(), Catch::Contains("manifest.json") && Catch::Contains("aux_layer_ids"));
    }
  }
}

TEST_CASE("a manifest says where its last hidden state was taken; a store reads it without the aux features",
          "[features]") {
  test::TempDir tmp;
  auto s = tiny_store(tmp.path());
  const auto path = tmp / features::kFeaturesManifest;
  auto read_back = [&](const json& j) {
    test::write_file(path, j.dump());
    return features::read_manifest(tmp.path().string());
  };
  for (bool pre_norm : {false, true}) {
    auto m = s.manifest;
    m.layout.pre_norm = pre_norm;  // dump-features --features_pre_norm
    const auto j = features::to_json(m);
    CHECK(j["layout"]["last_hidden"] == (pre_norm ? "before the final norm" : "after the final norm"));
    CHECK(read_back(j).layout.pre_norm == pre_norm);
  }
  auto j = features::to_json(s.manifest);
  j["layout"].erase("last_hidden");  // a manifest without the field holds the state after the norm
  CHECK_FALSE(read_back(j).layout.pre_norm);
  j["layout"]["last_hidden"] = "normed";
  try {
    read_back(j);
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::input);
    CHECK_THAT(e.format(), Catch::Contains("layout.last_hidden") && Catch::Contains("normed"));
  }
  // An MTP head reads the last hidden state alone: no aux buffer, the aux features skipped.
  const auto store = open(s);
  std::vector<float> last(3 * kHidden);
  std::vector<std::int64_t> argmax(3);
  store->read(1, 1, 3, nullptr, nullptr, last.data(), argmax.data());  // tokens 4..6 of the shard
  for (std::int64_t k = 0; k < 3 * kHidden; ++k)
    CHECK(last[static_cast<std::size_t>(k)] == static_cast<float>(4 * kHidden + k));  // rows 4..6 of the arange
  CHECK(argmax == std::vector<std::int64_t>{5, 6, 15});
}

TEST_CASE("NaN or Inf in stored features is refused naming the shard, tensor, sample and position", "[features]") {
  test::TempDir tmp;
  for (const char* name : {"aux_hidden", "last_hidden"}) {
    for (const float v : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
      auto s = tiny_store(tmp / fmt::format("{}-{}", name, v));
      s.tensors[name] = s.tensors[name].clone();
      s.tensors[name][5][1] = v;
      features::write_shard(s.dir.string(), s.manifest.shards[0], s.tensors);
      CHECK_THAT(open_error(s),
                 Catch::Contains("train-00000.safetensors") && Catch::Contains("NaN or Inf") &&
                     Catch::Contains(fmt::format("tensor \"{}\", sample 1 of split train, position 2", name)));
    }
  }
}

TEST_CASE("the finite check knows each dtype's NaN and Inf", "[features]") {
  for (const auto dtype : {torch::kBFloat16, torch::kHalf, torch::kFloat32, torch::kFloat64}) {
    INFO(c10::toString(dtype));
    auto t = torch::linspace(-65000, 65000, 3000).to(dtype);
    CHECK(features::first_non_finite(t.data_ptr(), t.numel(), dtype) == -1);
    for (const double v : {std::nan(""), -std::numeric_limits<double>::infinity()}) {
      auto u = t.clone();
      u[2047] = v;
      CHECK(features::first_non_finite(u.data_ptr(), u.numel(), dtype) == 2047);
    }
  }
}

TEST_CASE("fuzzed feature shards are read or refused, never read outside the file", "[features]") {
  test::TempDir tmp;
  auto s = tiny_store(tmp.path());
  const auto path = s.dir / s.manifest.shards[0].file;
  const std::string good = test::read_file(path);
  test::FuzzCounts counts;
  std::mt19937_64 rng(27);
  auto run = [&](const std::string& bytes, const std::string& what) {
    test::write_file(path, bytes);
    counts.run(what, [&] { read_all(*open(s), s.train); });
  };
  // The header's shapes and data offsets set to values that break size arithmetic.
  std::uint64_t header_len = 0;
  for (int b = 0; b < 8; ++b) header_len |= static_cast<std::uint64_t>(static_cast<unsigned char>(good[b])) << (8 * b);
  const json header = json::parse(good.substr(8, header_len));
  const std::string body = good.substr(8 + header_len);
  const auto& adv = test::adversarial_values();
  const std::vector<std::string> names = {"aux_hidden", "last_hidden", "target_argmax", "sample_offsets"};
  for (int i = 0; i < 1500; ++i) {
    json h = header;
    auto& t = h[names[rng() % names.size()]];
    const auto v = adv[rng() % adv.size()];
    if (rng() % 2) {
      t["shape"][rng() % t["shape"].size()] = rng() % 3 ? json(v) : json(static_cast<std::int64_t>(rng() % 16) - 2);
    } else {
      t["data_offsets"][rng() % 2] = rng() % 3 ? json(v) : json(rng() % 400);
    }
    std::string text = h.dump();
    std::string bytes(8, '\0');
    test::put_le(bytes, 0, text.size(), 8);
    run(bytes + text + body, "header case " + std::to_string(i) + ": " + text);
  }
  // Adversarial values in the stored offsets and argmax (the data, not the header).
  const auto at = [&](const char* name) { return 8 + header_len + header[name]["data_offsets"][0].get<std::size_t>(); };
  for (int i = 0; i < 1500; ++i) {
    std::string bytes = good;
    const bool offsets = rng() % 2;
    const auto v = rng() % 4 ? adv[rng() % adv.size()] : static_cast<std::uint64_t>(rng() % 9);
    if (offsets)
      test::put_le(bytes, at("sample_offsets") + 8 * (rng() % 3), v, 8);
    else
      test::put_le(bytes, at("target_argmax") + 4 * (rng() % 7), v, 4);
    run(bytes, fmt::format("{} value {}", offsets ? "offsets" : "argmax", v));
  }
  for (int i = 0; i < 1000; ++i) run(test::random_mutation(good, rng), "random case " + std::to_string(i));
  CHECK(counts.ok > 0);
  CHECK(counts.refused > 2000);
}

TEST_CASE("a speculators folder's hidden-state headers are checked when it is opened, NaN when read", "[features]") {
  test::TempDir tmp;
  const auto dir = tmp / "spec";
  fs::copy(std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/speculators/tiny-llama", dir, fs::copy_options::recursive);
  const auto rows = data::read_speculators_folder(dir.string(), test::load_options());
  REQUIRE(rows.rows.size() == 8);
  const auto hs = [&](int row) { return data::speculators_hidden_file(dir.string(), row); };
  auto open_spec = [&] { return features::open_speculators_features(dir.string(), rows.samples, rows.rows, 64, 3); };
  const auto last_row = hs(7), saved = test::read_file(last_row);
  auto tensors = model::load_safetensors(last_row);
  for (auto& [name, t] : tensors) t = t.clone();  // off the mapping the file is rewritten under

  SECTION("a torn file of the last row") {
    test::write_file(last_row, "junk");
    CHECK_THROWS_WITH(open_spec(), Catch::Contains("hs_7.safetensors"));
  }
  SECTION("the last row with another number of layers") {
    auto t = tensors;
    t["hidden_states"] = t["hidden_states"].narrow(1, 0, 3).contiguous();
    model::save_safetensors(last_row, t);
    CHECK_THROWS_WITH(open_spec(), Catch::Contains("hs_7.safetensors") && Catch::Contains("another shape"));
  }
  SECTION("the last row's token_ids of another length") {
    auto t = tensors;
    t["token_ids"] = t["token_ids"].narrow(0, 0, 2).contiguous();
    model::save_safetensors(last_row, t);
    CHECK_THROWS_WITH(open_spec(), Catch::Contains("hs_7.safetensors") && Catch::Contains("token_ids"));
  }
  SECTION("NaN in the last row: named by file and position when the row is read") {
    auto t = tensors;
    t["hidden_states"][1][3][0] = std::nanf("");
    model::save_safetensors(last_row, t);
    auto store = open_spec();
    const auto n = rows.samples.length(7);
    std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
    for (std::int64_t p = 0; p < n; ++p)
      ids[static_cast<std::size_t>(p)] = static_cast<std::int32_t>(rows.samples.token(7, p));
    const auto elem = c10::elementSize(store->layout().dtype);
    std::vector<std::uint8_t> aux(static_cast<std::size_t>(n * 3 * 64) * elem),
        last(static_cast<std::size_t>(n * 64) * elem);
    try {
      store->read(7, 0, n, ids.data(), aux.data(), last.data(), nullptr);
      FAIL("NaN hidden states were read");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::input);
      CHECK_THAT(e.format(), Catch::Contains("hs_7.safetensors") && Catch::Contains("NaN or Inf") &&
                                 Catch::Contains("position 1, layer slot 3"));
    }
  }
  test::write_file(last_row, saved);
  CHECK_NOTHROW(open_spec());
}

TEST_CASE("train refuses a dump's out-of-vocabulary argmax and its NaN by shard (exit 3, not 1, 0 or 5)",
          "[features]") {
  test::TempDir tmp;
  const std::string root = EAGLE_SOURCE_DIR;
  const auto dump = tmp / "f";
  auto d = test::run_cli("dump-features " + test::smoke_args() + " --training_seq_len 64 --output " + dump.string());
  INFO(d.output);
  REQUIRE(d.exit_code == 0);
  const auto m = features::read_manifest(dump.string());
  const auto shard = dump / m.shards[0].file;
  const std::string good = test::read_file(shard);
  auto patched = [&](const char* name, std::size_t index, const std::string& bytes) {
    auto tensors = model::load_safetensors(shard.string());
    for (auto& [n, t] : tensors) t = t.clone();
    auto flat = tensors.at(name).view({-1});
    std::memcpy(static_cast<char*>(flat.data_ptr()) + index * flat.element_size(), bytes.data(), bytes.size());
    features::write_shard(dump.string(), m.shards[0], tensors);
  };
  auto train = [&](const std::string& run) {
    return test::run_cli("train --config " + root + "/configs/smoke.json --data_path '' --model_name_or_path '' " +
                         "--features_path " + dump.string() + " --training_seq_len 64 --max_steps 2 --eval_steps 0 " +
                         "--save_steps 0 --output_dir " + (tmp / run).string());
  };
  for (const std::int32_t bad : {512, -1}) {
    patched("target_argmax", 5, std::string(reinterpret_cast<const char*>(&bad), 4));
    auto r = train("argmax" + std::to_string(bad));
    INFO(r.output);
    CHECK(r.exit_code == 3);
    CHECK_THAT(r.output, Catch::Contains("train-00000.safetensors") && Catch::Contains("target_argmax\"[5]") &&
                             Catch::Contains("[0, 512)"));
    test::write_file(shard, good);
  }
  patched("last_hidden", 70, std::string("\xc0\x7f", 2));  // a bfloat16 NaN
  auto r = train("nan");
  INFO(r.output);
  CHECK(r.exit_code == 3);
  CHECK_THAT(r.output, Catch::Contains("train-00000.safetensors") && Catch::Contains("NaN or Inf") &&
                           Catch::Contains("tensor \"last_hidden\""));
}
