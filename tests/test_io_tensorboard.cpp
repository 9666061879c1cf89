// TensorBoard event files: CRC32C against published vectors, exact protobuf bytes, TFRecord
// framing read back in C++, and the files read by the PyPI tensorboard package itself.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>

#include "eagle/io/run_logger.h"
#include "eagle/io/tensorboard.h"
#include "helpers.h"

using namespace eagle::io;
namespace fs = std::filesystem;

namespace {

// Acceptance metrics with only the chain AR measured.
AcceptanceStats ar_of(double ar) {
  AcceptanceStats a;
  a.ar = ar;
  return a;
}

std::uint64_t read_le(const std::string& s, std::size_t pos, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(s[pos + i])) << (8 * i);
  return v;
}

// Splits a TFRecord file into its payloads, checking every length and masked CRC.
std::vector<std::string> read_records(const std::string& file) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < file.size()) {
    REQUIRE(pos + 12 <= file.size());
    std::uint64_t len = read_le(file, pos, 8);
    CHECK(read_le(file, pos + 8, 4) == mask_crc(crc32c(file.substr(pos, 8))));
    REQUIRE(pos + 12 + len + 4 <= file.size());
    std::string data = file.substr(pos + 12, len);
    CHECK(read_le(file, pos + 12 + len, 4) == mask_crc(crc32c(data)));
    out.push_back(data);
    pos += 12 + len + 4;
  }
  return out;
}

// Runs the tensorboard package on `logdir`: the EventAccumulator, and the plugin accumulator that
// `tensorboard --logdir` serves from (it turns simple_value into tensors). Returns
// {"file_version": f, "scalars": {tag: [[step, value], ...]}, "served": {same, from the plugin one}}.
nlohmann::json read_with_tensorboard(const fs::path& logdir, const eagle::test::TempDir& tmp) {
  fs::path script = tmp / "read_events.py";
  eagle::test::write_file(script,
                          "import json, sys\n"
                          "from tensorboard.backend.event_processing.event_accumulator import EventAccumulator\n"
                          "ea = EventAccumulator(sys.argv[1], size_guidance={'scalars': 0})\n"
                          "ea.Reload()\n"
                          "out = {'file_version': ea.file_version, 'scalars': {t: [[e.step, e.value] for e in "
                          "ea.Scalars(t)] for t in ea.Tags()['scalars']}}\n"
                          "from tensorboard.backend.event_processing import plugin_event_accumulator as pea\n"
                          "from tensorboard.util import tensor_util\n"
                          "pa = pea.EventAccumulator(sys.argv[1], size_guidance={'tensors': 0})\n"
                          "pa.Reload()\n"
                          "out['served'] = {t: [[e.step, float(tensor_util.make_ndarray(e.tensor_proto))] for e in "
                          "pa.Tensors(t)] for t in pa.Tags()['tensors']}\n"
                          "print(json.dumps(out))\n");
  REQUIRE(fs::exists(eagle::test::venv_python()));
  std::string cmd =
      eagle::test::venv_python() + " " + script.string() + " " + logdir.string() + " 2>" + (tmp / "py.err").string();
  auto r = eagle::test::run_command(cmd);
  INFO(eagle::test::read_file(tmp / "py.err"));
  REQUIRE(r.exit_code == 0);
  return nlohmann::json::parse(r.output);
}

}  // namespace

TEST_CASE("crc32c matches the published test vectors", "[io]") {
  CHECK(crc32c("123456789") == 0xE3069283u);
  CHECK(crc32c("") == 0u);
  // RFC 3720 (iSCSI) appendix B.4.
  CHECK(crc32c(std::string(32, '\0')) == 0x8A9136AAu);
  CHECK(crc32c(std::string(32, '\xff')) == 0x62A8AB43u);
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) {
    ascending.push_back(static_cast<char>(i));
    descending.push_back(static_cast<char>(31 - i));
  }
  CHECK(crc32c(ascending) == 0x46DD794Eu);
  CHECK(crc32c(descending) == 0x113FDB5Cu);
  // Continuing a CRC equals computing it in one go.
  CHECK(crc32c("56789", crc32c("1234")) == 0xE3069283u);
  CHECK(mask_crc(0) == 0xa282ead8u);
  // ((0xE3069283 >> 15) | (0xE3069283 << 17)) + 0xa282ead8, worked out by hand: 0x1C60D + 0x25060000
  // (mod 2^32) = 0x2507C60D; + 0xa282ead8 = 0xC78AB0E5.
  CHECK(mask_crc(0xE3069283u) == 0xC78AB0E5u);
}

TEST_CASE("events are encoded as the exact protobuf bytes", "[io]") {
  // Event{wall_time: 1.0, step: 5, summary{value{tag: "a", simple_value: 1.0}}}
  std::string expected = std::string("\x09\x00\x00\x00\x00\x00\x00\xf0\x3f", 9) + "\x10\x05" + "\x2a\x0a" + "\x0a\x08" +
                         "\x0a\x01" "a" + std::string("\x15\x00\x00\x80\x3f", 5);
  CHECK(encode_scalars_event(1.0, 5, {{"a", 1.0f}}) == expected);
  // Event{wall_time: 2.0, file_version: "brain.Event:2"}; step 0 is the default and not written.
  std::string fv = std::string("\x09\x00\x00\x00\x00\x00\x00\x00\x40", 9) + "\x1a\x0d" "brain.Event:2";
  CHECK(encode_file_version_event(2.0) == fv);
  // A step of 300 takes a two-byte varint (0xAC 0x02); session_log{status: START}.
  std::string start = std::string("\x09\x00\x00\x00\x00\x00\x00\xf0\x3f", 9) + "\x10\xac\x02" + "\x3a\x02\x08\x01";
  CHECK(encode_session_start_event(1.0, 300) == start);
}

TEST_CASE("TFRecord framing: length, masked CRCs, payload", "[io]") {
  std::string frame = tfrecord_frame("abc");
  REQUIRE(frame.size() == 8 + 4 + 3 + 4);
  CHECK(frame.substr(0, 8) == std::string("\x03\0\0\0\0\0\0\0", 8));
  CHECK(read_le(frame, 8, 4) == mask_crc(crc32c(frame.substr(0, 8))));
  CHECK(frame.substr(12, 3) == "abc");
  CHECK(read_le(frame, 15, 4) == mask_crc(crc32c("abc")));
}

TEST_CASE("the writer names the file and writes file_version first", "[io]") {
  eagle::test::TempDir tmp;
  fs::path first, second;
  {
    TensorBoardWriter w(tmp.path());
    first = w.path();
    w.add_scalar("train/loss", 2.5f, 1, 10.0);
    TensorBoardWriter w2(tmp.path());  // same second: a new file, never appended to the first
    second = w2.path();
  }
  std::string name = first.filename().string();
  CHECK(name.rfind("events.out.tfevents.", 0) == 0);
  CHECK(first != second);
  auto records = read_records(eagle::test::read_file(first));
  REQUIRE(records.size() == 2);
  CHECK(records[0].find("brain.Event:2") != std::string::npos);
  CHECK(records[1] == encode_scalars_event(10.0, 1, {{"train/loss", 2.5f}}));
}

TEST_CASE("the tensorboard package reads the scalars back", "[io]") {
  eagle::test::TempDir tmp;
  fs::path logdir = tmp / "run";
  {
    TensorBoardWriter w(logdir);
    for (int step = 1; step <= 5; ++step)
      w.add_scalars(step, {{"train/loss", 4.0f - 0.5f * step}, {"train/acc_0", 0.1f * step}});
    w.add_scalar("eval/ar", 2.25f, 5);
    w.add_scalar("big_step", 1.5f, 123456789012LL);
  }
  auto doc = read_with_tensorboard(logdir, tmp);
  CHECK(doc["file_version"] == 2.0);
  auto s = doc["scalars"];
  REQUIRE(s["train/loss"].size() == 5);
  for (int i = 0; i < 5; ++i) {
    CHECK(s["train/loss"][i][0] == i + 1);
    CHECK(s["train/loss"][i][1].get<double>() == Approx(4.0 - 0.5 * (i + 1)).epsilon(1e-7));
    CHECK(s["train/acc_0"][i][1].get<double>() == Approx(0.1 * (i + 1)).epsilon(1e-6));
  }
  CHECK(s["eval/ar"] == nlohmann::json::parse("[[5, 2.25]]"));
  CHECK(s["big_step"][0][0] == 123456789012LL);
  CHECK(doc["served"]["eval/ar"] == nlohmann::json::parse("[[5, 2.25]]"));
}

TEST_CASE("a resumed run's restart marker drops the steps it repeats", "[io]") {
  eagle::test::TempDir tmp;
  {
    TensorBoardWriter w(tmp.path());
    w.session_start(0);
    for (int step = 1; step <= 6; ++step) w.add_scalar("train/loss", static_cast<float>(step), step);
  }
  {
    // Resumed from the checkpoint at step 4: steps 5 and 6 are done again with other values.
    TensorBoardWriter w(tmp.path());
    w.session_start(5);
    for (int step = 5; step <= 7; ++step) w.add_scalar("train/loss", 10.0f * step, step);
  }
  auto doc = read_with_tensorboard(tmp.path(), tmp);
  auto expected = nlohmann::json::parse("[[1, 1.0], [2, 2.0], [3, 3.0], [4, 4.0], [5, 50.0], [6, 60.0], [7, 70.0]]");
  CHECK(doc["scalars"]["train/loss"] == expected);
  CHECK(doc["served"]["train/loss"] == expected);
}

TEST_CASE("the run logger feeds metrics.jsonl and TensorBoard the same numbers, across a resume",
          "[io][tensorboard][metrics]") {
  eagle::test::TempDir tmp;
  fs::path out = tmp / "run";
  auto stats = [](std::int64_t step, double loss) {
    StepStats s;
    s.step = step;
    s.total_steps = 6;
    s.loss = loss;
    s.acc = {0.5, 0.25};
    s.lr = 1e-4;
    return s;
  };
  {
    RunLogger log(out, 6, std::nullopt, ProgressMode::off);
    for (std::int64_t step = 1; step <= 4; ++step) {
      log.on_step(step);
      if (step == 2) {
        EvalStats e{2, 3.5, {0.75, 0.5}, 2.0, ar_of(2.5)};
        log.log_step(stats(step, 5.0 - step), &e);
      } else {
        log.log_step(stats(step, 5.0 - step));
      }
    }
  }
  {
    // Resumed from checkpoint-3: step 4 is done again, then 5 and 6 and a final evaluation.
    RunLogger log(out, 6, 3, ProgressMode::off);
    for (std::int64_t step = 4; step <= 6; ++step) log.log_step(stats(step, 10.0 * step));
    log.log_eval(EvalStats{6, 1.0, {0.875, 0.75}, 2.5, AcceptanceStats()});
  }
  std::vector<nlohmann::json> lines;
  std::istringstream in(eagle::test::read_file(out / "metrics.jsonl"));
  for (std::string l; std::getline(in, l);) lines.push_back(nlohmann::json::parse(l));
  REQUIRE(lines.size() == 7);
  std::vector<std::int64_t> steps;
  for (const auto& l : lines) steps.push_back(l["step"]);
  CHECK(steps == std::vector<std::int64_t>{1, 2, 3, 4, 5, 6, 6});
  CHECK(lines[1]["ar"] == 2.5);
  CHECK(lines[1]["loss"] == 3.0);
  CHECK(lines[1]["eval_acc"] == nlohmann::json::parse("[0.75, 0.5]"));
  CHECK_FALSE(lines[0].contains("ar"));
  CHECK(lines[3]["loss"] == 40.0);
  CHECK(lines[6] ==
        nlohmann::json::parse(R"({"step": 6, "eval_loss": 1.0, "eval_acc": [0.875, 0.75], "eval_tau": 2.5})"));

  auto doc = read_with_tensorboard(out, tmp);
  CHECK(doc["scalars"]["train/loss"] ==
        nlohmann::json::parse("[[1, 4.0], [2, 3.0], [3, 2.0], [4, 40.0], [5, 50.0], [6, 60.0]]"));
  CHECK(doc["scalars"]["eval/ar"] == nlohmann::json::parse("[[2, 2.5]]"));
  CHECK(doc["scalars"]["eval/acc_1"] == nlohmann::json::parse("[[2, 0.5], [6, 0.75]]"));
  CHECK(doc["scalars"]["train/acc_1"].size() == 6);
  CHECK(doc["served"]["train/loss"] == doc["scalars"]["train/loss"]);
}
