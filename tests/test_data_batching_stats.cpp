// Batching statistics (efficiency, shapes, attention cost, percentiles, suggested boundaries) on
// hand-built lengths, and eagle-train data-stats end to end on a small JSONL file.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "eagle/data/batching_stats.h"
#include "helpers.h"

using namespace eagle::data;
using eagle::test::run_cli;
using eagle::test::TempDir;

namespace {

// A JSONL file of one sample per length: ids 1..n, every token trained but the first.
void write_samples(const std::filesystem::path& path, const std::vector<int>& lengths) {
  std::string jsonl;
  for (int n : lengths) {
    std::string ids, mask;
    for (int i = 0; i < n; ++i) {
      if (i) ids += ',';
      ids += std::to_string(i + 1);
      mask += (i ? ",1" : "0");
    }
    jsonl += "{\"input_ids\": [" + ids + "], \"loss_mask\": [" + mask + "]}\n";
  }
  eagle::test::write_file(path, jsonl);
}

}  // namespace

TEST_CASE("length summary: nearest-rank percentiles and power-of-two histogram", "[data]") {
  LengthSummary s = summarize_lengths({5, 1, 3, 2, 4});
  CHECK(s.samples == 5);
  CHECK(s.tokens == 15);
  CHECK(s.min == 1);
  CHECK(s.max == 5);
  CHECK(s.p50 == 3);
  CHECK(s.p90 == 5);
  CHECK(s.mean == 3.0);
  CHECK(s.histogram == std::vector<std::int64_t>{1, 2, 2});
}

TEST_CASE("mode report: efficiency, shapes and attention cost are exact", "[data]") {
  SamplerOptions o;
  o.training_seq_len = 256;
  o.bucket_granularity = 64;
  o.rows = 2;
  // Batches (see test_batching): 2x256, 2x192, 2x64, 2x64.
  ModeReport r = evaluate_mode({10, 200, 30, 130, 60, 250, 100, 20}, o, "g64");
  CHECK(r.batches == 4);
  CHECK(r.real_tokens == 800);
  CHECK(r.computed_tokens == 1152);
  CHECK(r.efficiency == Approx(800.0 / 1152.0));
  CHECK(r.shapes_used == 3);
  CHECK(r.shapes_possible == 4);
  CHECK(r.attention_vs_ideal == Approx(221184.0 / 134400.0));
}

TEST_CASE("suggested boundaries pad the samples least", "[data]") {
  // Expected values from an exhaustive search over all boundary sets (least total padding).
  std::vector<std::int64_t> lengths;
  for (std::int64_t i = 1; i <= 100; ++i) lengths.push_back(i);
  CHECK(suggest_boundaries(lengths, 128, 4, 16) == std::vector<std::int64_t>{32, 64, 96, 128});
  CHECK(suggest_boundaries({7, 7, 7, 7}, 128, 4, 16) == std::vector<std::int64_t>{16, 128});
  CHECK(suggest_boundaries({5, 20, 20, 40, 100}, 128, 3, 16) == std::vector<std::int64_t>{32, 48, 128});
  CHECK(suggest_boundaries({5, 20, 20, 40, 100}, 128, 1, 16) == std::vector<std::int64_t>{128});
}

TEST_CASE("the granularity grid reaches long contexts and holds the given granularity", "[data]") {
  SamplerOptions o;
  o.training_seq_len = 2048;
  o.bucket_granularity = 128;
  CHECK(granularity_grid(o) == std::vector<std::int64_t>{0, 64, 128, 256, 512, 1024});
  o.training_seq_len = 131072;
  o.bucket_granularity = 3000;
  CHECK(granularity_grid(o) == std::vector<std::int64_t>{0, 64, 128, 256, 512, 1024, 2048, 3000, 4096, 8192});
  // A 131072-token sample at granularity 8192 and a budget of one such row: one shape, no padding.
  o.bucket_granularity = 8192;
  o.max_tokens_per_batch = 131072;
  const auto r = evaluate_mode({131072, 131000}, o, "long");
  CHECK(r.shapes_used == 1);
  CHECK(r.shapes_possible == 16);
}

TEST_CASE("data-stats prints the histogram and the mode grid as text and JSON", "[data]") {
  TempDir dir;
  // Lengths 3, 5, 9, 12: with 2 rows at training_seq_len 16, the baseline computes 64 tokens for 29
  // real ones; packed first-fit-decreasing rows {12, 3} and {9, 5} compute 32.
  write_samples(dir / "d.jsonl", {3, 5, 9, 12});
  const std::string args = "data-stats --data_path " + (dir / "d.jsonl").string() +
                           " --training_seq_len 16 --per_device_train_batch_size 2 --log_level warn";
  auto r = run_cli(args + " --json");
  REQUIRE(r.exit_code == 0);
  nlohmann::json j = nlohmann::json::parse(r.output);
  CHECK(j["lengths"]["samples"] == 4);
  CHECK(j["lengths"]["tokens"] == 29);
  CHECK(j["lengths"]["max"] == 12);
  CHECK(j["trained_tokens"] == 25);
  REQUIRE(j["modes"].size() == 16);
  int configured = 0;
  for (const auto& m : j["modes"]) {
    INFO(m.dump());
    if (m["configured"] == true) {
      ++configured;
      CHECK(m["bucket_granularity"] == 128);  // the default, capped at training_seq_len
      CHECK(m["group_by_length"] == true);
    }
    if (m["mode"] == "granularity 0 (baseline), grouped") CHECK(m["padding_efficiency"] == Approx(29.0 / 64.0));
    if (m["mode"] == "padding-free, grouped") {
      CHECK(m["padding_efficiency"] == Approx(29.0 / 32.0));
      CHECK(m["batches"] == 1);
      // Per document: 12^2 + 3^2 + 1 (padding) and 9^2 + 5^2 + 2^2, over 3^2 + 5^2 + 9^2 + 12^2.
      CHECK(m["attention_vs_ideal"] == Approx(264.0 / 259.0));
    }
  }
  CHECK(configured == 1);
  auto t = run_cli(args);
  REQUIRE(t.exit_code == 0);
  CHECK(t.output.find("lengths: min 3, p50 5, mean 7.2, p90 12, p99 12, max 12") != std::string::npos);
  CHECK(t.output.find("padding-free, grouped") != std::string::npos);
  CHECK(t.output.find("suggested bucket_boundaries") != std::string::npos);

  auto missing = run_cli("data-stats --data_path " + (dir / "none.jsonl").string());
  CHECK(missing.exit_code == 3);
  // A token budget must hold one full-length sample; refused before any data is read.
  auto small = run_cli("data-stats --data_path " + (dir / "none.jsonl").string() +
                       " --training_seq_len 16 --max_tokens_per_batch 15");
  CHECK(small.exit_code == 2);
  CHECK(small.output.find("--max_tokens_per_batch: expected 0 or an integer >= "
                          "training_seq_len (16), found 15") != std::string::npos);
}

TEST_CASE("data-stats --num_ranks shows each rank's share of the epoch", "[data]") {
  TempDir dir;
  // Eight samples of 3..10 tokens (52 in all); one row a rank: each global batch of 2 rows splits
  // into one batch per rank, so both ranks get 4 batches and every token lands on one of them.
  write_samples(dir / "d.jsonl", {3, 4, 5, 6, 7, 8, 9, 10});
  const std::string args = "data-stats --data_path " + (dir / "d.jsonl").string() +
                           " --training_seq_len 16 --per_device_train_batch_size 1 --log_level warn";
  auto r = run_cli(args + " --num_ranks 2 --json");
  REQUIRE(r.exit_code == 0);
  nlohmann::json j = nlohmann::json::parse(r.output);
  CHECK(j["num_ranks"] == 2);
  REQUIRE(j["ranks"].size() == 2);
  CHECK(j["ranks"][0]["batches"] == 4);
  CHECK(j["ranks"][1]["batches"] == 4);
  CHECK(j["ranks"][0]["real_tokens"].get<std::int64_t>() + j["ranks"][1]["real_tokens"].get<std::int64_t>() == 52);
  auto t = run_cli(args + " --num_ranks 2");
  REQUIRE(t.exit_code == 0);
  CHECK(t.output.find("per rank, the options given, 2 ranks (epoch 0)") != std::string::npos);
  auto one = run_cli(args);
  REQUIRE(one.exit_code == 0);
  CHECK(one.output.find("per rank") == std::string::npos);
  CHECK(run_cli(args + " --num_ranks 0").exit_code == 2);
}
