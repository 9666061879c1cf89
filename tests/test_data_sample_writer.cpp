// generate's resumable JSONL output: what a killed run leaves is cut back to its last commit and
// continued, the finished file is exactly the lines written, and prepare's reader reads it.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "data_helpers.h"
#include "eagle/data/json_reader.h"
#include "eagle/data/sample_writer.h"
#include "eagle/util/error.h"
#include "helpers.h"

using namespace eagle;
using data::Sample;
using data::SampleWriter;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::vector<Sample> samples() {
  return {{{1, 2, 3}, {0, 1, 1}}, {{4, 5}, {0, 1}}, {{6}, {1}}, {{7, 8, 9, 10}, {0, 0, 1, 1}}, {{11, 12}, {1, 0}}};
}

const json kSettings{{"max_new_tokens", 8}, {"seed", 42}};

}  // namespace

TEST_CASE("a killed generate run resumes after its last commit and the output is exact", "[data]") {
  test::TempDir dir;
  const auto out = (dir / "out.jsonl").string();
  const auto all = samples();
  {
    SampleWriter w(out, kSettings);
    CHECK(w.samples_done() == 0);
    CHECK(w.resumed_counts().is_null());
    w.write(all[0]);
    w.skip();  // sample 1 dropped
    w.write(all[2]);
    w.commit(json{{"samples", 3}});
    w.write(all[3]);  // buffered, never committed: lost with the process
  }
  // A write torn by the kill after the commit.
  std::ofstream(out + data::kPartSuffix, std::ios::app) << "{\"input_ids\":[1,";
  CHECK(!fs::exists(out));
  {
    SampleWriter w(out, kSettings);
    CHECK(w.samples_done() == 3);
    CHECK(w.resumed_counts() == json{{"samples", 3}});
    w.write(all[3]);
    w.write(all[4]);
    w.finish(json{{"samples", 5}});
  }
  CHECK(!fs::exists(out + data::kPartSuffix));
  CHECK(json::parse(test::read_file(out + data::kProgressSuffix))["complete"] == true);  // what a rerun reads
  CHECK(test::read_file(out) == data::sample_jsonl(all[0]) + data::sample_jsonl(all[2]) + data::sample_jsonl(all[3]) +
                                    data::sample_jsonl(all[4]));
  CHECK(data::sample_jsonl(all[0]) == "{\"input_ids\":[1,2,3],\"loss_mask\":[0,1,1]}\n");

  // prepare's reader reads it back as written.
  data::FlatBuilder b;
  data::read_sample_files({out}, data::ReadOptions{}, b);
  CHECK(test::same(test::all_samples(b.finish(out, {})), {all[0], all[2], all[3], all[4]}));
}

TEST_CASE("the writer refuses an existing output, another run's progress and a non-.jsonl name", "[data]") {
  test::TempDir dir;
  const auto out = (dir / "out.jsonl").string();
  {
    SampleWriter w(out, kSettings);
    w.write(samples()[0]);
    w.commit(json());
  }
  json other = kSettings;
  other["seed"] = 7;
  CHECK_THROWS_WITH(SampleWriter(out, other), Catch::Contains("other settings") && Catch::Contains("\"seed\"") &&
                                                  Catch::Contains("to start over"));
  // A path spelled another way is the same setting (compared as files, not as strings).
  fs::create_directories(dir / "model");
  json spelled = kSettings;
  spelled["model_name_or_path"] = (dir / "model").string();
  const auto out2 = (dir / "out2.jsonl").string();
  { SampleWriter(out2, spelled).commit(json()); }
  spelled["model_name_or_path"] = (dir / "." / "model").string();
  CHECK_NOTHROW(SampleWriter(out2, spelled));
  spelled["model_name_or_path"] = (dir / "other").string();
  CHECK_THROWS_WITH(SampleWriter(out2, spelled), Catch::Contains("model_name_or_path"));
  { SampleWriter(out, kSettings).finish(json{{"samples", 1}}); }
  CHECK_THROWS_WITH(SampleWriter(out, kSettings), Catch::Contains("already exists"));
  // A finished output: check_output lets it through for finished() to decide (nothing to do with the
  // same settings, refused naming the first other one); an output changed since is refused.
  CHECK_NOTHROW(SampleWriter::check_output(out));
  CHECK(SampleWriter::finished(out, kSettings) == json{{"samples", 1}});
  CHECK_THROWS_WITH(SampleWriter::finished(out, other), Catch::Contains("other settings") && Catch::Contains("seed"));
  test::write_file(dir / "unrecorded.jsonl", "{}\n");
  CHECK_THROWS_WITH(SampleWriter::check_output((dir / "unrecorded.jsonl").string()), Catch::Contains("already exists"));
  test::write_file(out, test::read_file(out) + "{}\n");
  CHECK_THROWS_WITH(SampleWriter::check_output(out), Catch::Contains("already exists"));
  CHECK_THROWS_WITH(SampleWriter((dir / "out.txt").string(), kSettings), Catch::Contains(".jsonl"));
}

TEST_CASE("the writer never writes through a link planted at OUTPUT.partial", "[data]") {
  test::TempDir dir;
  const auto out = (dir / "out.jsonl").string();
  test::write_file(dir / "victim", "precious");
  std::filesystem::create_symlink(dir / "victim", out + data::kPartSuffix);
  CHECK_THROWS_WITH(SampleWriter(out, kSettings), Catch::Contains("symbolic link") && Catch::Contains(".partial"));
  CHECK(test::read_file(dir / "victim") == "precious");
  // Resuming (a progress file there) opens the part file with O_NOFOLLOW: refused the same way.
  {
    std::filesystem::remove(out + data::kPartSuffix);
    SampleWriter w(out, kSettings);
    w.write(samples()[0]);
    w.commit(json());
  }
  std::filesystem::remove(out + data::kPartSuffix);
  test::write_file(dir / "big", std::string(4096, 'x'));
  std::filesystem::create_symlink(dir / "big", out + data::kPartSuffix);
  CHECK_THROWS_AS(SampleWriter(out, kSettings), eagle::Error);
  CHECK(test::read_file(dir / "big") == std::string(4096, 'x'));
}
