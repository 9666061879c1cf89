// Data parallelism on CPU (Gloo) with two real processes on 127.0.0.1: two ranks of b rows train
// exactly what one rank of 2b rows trains; a resume with two ranks is bit-exact and with another
// number is refused; a dead rank ends the other with an error, a signal to one rank stops both
// after a checkpoint, and so does a SIGKILL of their launcher. Free ports are picked per test, so
// concurrent runs never collide.
#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "eagle/model/safetensors.h"
#include "helpers.h"

using eagle::test::logged_losses;
using eagle::test::run_cli;
using eagle::test::TempDir;
using eagle::test::wait_exit;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kSmoke = eagle::test::smoke_args() + " --num_threads 1 --eval_steps 0 --eval_num_prompts 0";

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t n = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  ::close(fd);
  return ntohs(a.sin_port);
}

std::string torchrun() { return fs::path(eagle::test::venv_python()).parent_path() / "torchrun"; }

// Rank r of 2 started by hand (what torchrun does, without its agent), output to log.
pid_t start_rank(int rank, int port, const std::string& args, const fs::path& log) {
  return eagle::test::start_cli("train " + args, log,
                                fmt::format("RANK={0} LOCAL_RANK={0} WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 "
                                            "MASTER_ADDR=127.0.0.1 MASTER_PORT={1}",
                                            rank, port));
}

double max_difference(const fs::path& a, const fs::path& b) {
  auto ta = eagle::model::load_safetensors(a.string()), tb = eagle::model::load_safetensors(b.string());
  double worst = 0;
  for (const auto& [name, t] : ta)
    if (t.is_floating_point()) worst = std::max(worst, (t - tb.at(name)).abs().max().item<double>());
  return worst;
}

}  // namespace

TEST_CASE("two ranks under torchrun train what one rank trains; resume is bit-exact, another world refused",
          "[train]") {
  REQUIRE(fs::exists(torchrun()));
  TempDir dir;
  const std::string common = kSmoke + " --max_steps 8 --save_steps 4 --save_total_limit 0 --logging_steps 2";
  auto single = run_cli("train " + common + " --per_device_train_batch_size 4 --output_dir " + (dir / "one").string());
  INFO(single.output);
  REQUIRE(single.exit_code == 0);
  auto ddp = [&](const fs::path& out, const std::string& extra) {
    return eagle::test::run_command(torchrun() + " --standalone --nproc-per-node 2 --no-python " + EAGLE_TRAIN_BIN +
                                    " train " + common + " --per_device_train_batch_size 2 --output_dir " +
                                    out.string() + extra + " 2>&1");
  };
  auto two = ddp(dir / "two", "");
  INFO(two.output);
  REQUIRE(two.exit_code == 0);
  CHECK_THAT(two.output, Catch::Contains("rank 0 of 2") && Catch::Contains("on each of 2 ranks"));
  auto a = logged_losses(dir / "one"), b = logged_losses(dir / "two");
  REQUIRE(a.size() == 4);
  REQUIRE(b.size() == 4);
  for (const auto& [step, loss] : a) CHECK(b.at(step) == Approx(loss).epsilon(1e-6));
  CHECK(max_difference(dir / "one" / "checkpoint-8" / "model.safetensors",
                       dir / "two" / "checkpoint-8" / "model.safetensors") < 1e-6);
  CHECK(json::parse(eagle::test::read_file(dir / "two" / "checkpoint-8" / "trainer_state.json"))["world_size"] == 2);

  // Resumed from step 4 with two ranks: the same numbers, bit for bit.
  fs::create_directories(dir / "resumed");
  fs::copy(dir / "two" / "checkpoint-4", dir / "resumed" / "checkpoint-4", fs::copy_options::recursive);
  auto resumed = ddp(dir / "resumed", " --resume_from_checkpoint auto");
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  auto c = logged_losses(dir / "resumed");
  for (std::int64_t step : {6, 8}) CHECK(c.at(step) == b.at(step));
  CHECK(max_difference(dir / "two" / "checkpoint-8" / "model.safetensors",
                       dir / "resumed" / "checkpoint-8" / "model.safetensors") == 0.0);
  CHECK(max_difference(dir / "two" / "checkpoint-8" / "optimizer.safetensors",
                       dir / "resumed" / "checkpoint-8" / "optimizer.safetensors") == 0.0);

  // Ranks that would resume different checkpoints (an output_dir that is not one shared folder):
  // rank 0 finds checkpoint-4, rank 1 nothing; both stop before training.
  fs::create_directories(dir / "split0");
  fs::copy(dir / "two" / "checkpoint-4", dir / "split0" / "checkpoint-4", fs::copy_options::recursive);
  const int port = free_port();
  const std::string split = common + " --per_device_train_batch_size 2 --resume_from_checkpoint auto --output_dir ";
  const pid_t r0 = start_rank(0, port, split + (dir / "split0").string(), dir / "split0.log");
  const pid_t r1 = start_rank(1, port, split + (dir / "split1").string(), dir / "split1.log");
  CHECK(wait_exit(r0) == 2);
  CHECK(wait_exit(r1) == 2);
  const auto split_log = eagle::test::read_file(dir / "split0.log") + eagle::test::read_file(dir / "split1.log");
  INFO(split_log);
  CHECK_THAT(split_log, Catch::Contains("the ranks did not resume from the same checkpoint"));

  // One process cannot continue a two-rank run: the data order is planned per rank.
  auto refused = run_cli("train " + common + " --per_device_train_batch_size 2 --resume_from_checkpoint " +
                         (dir / "two" / "checkpoint-4").string() + " --output_dir " + (dir / "other").string());
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.output, Catch::Contains("another number of ranks") && Catch::Contains("world_size"));
}

TEST_CASE("a dead rank ends the other with an error; a signal to one rank stops both after a checkpoint", "[train]") {
  TempDir dir;
  const std::string args = kSmoke + " --max_steps 400 --logging_steps 1 --save_steps 0 --ddp_timeout_s 60";
  SECTION("SIGKILL to rank 1") {
    const int port = free_port();
    const auto out = dir / "killed";
    pid_t r0 = start_rank(0, port, args + " --output_dir " + out.string(), dir / "r0.log");
    pid_t r1 = start_rank(1, port, args + " --output_dir " + out.string(), dir / "r1.log");
    for (int i = 0; i < 1200 && logged_losses(out).size() < 2; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    REQUIRE(logged_losses(out).size() >= 2);
    kill(r1, SIGKILL);
    wait_exit(r1);
    const auto t0 = std::chrono::steady_clock::now();
    const int code = wait_exit(r0);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string log = eagle::test::read_file(dir / "r0.log");
    INFO(log);
    CHECK(code != 0);
    CHECK(code != 130);
    CHECK(waited < 70.0);  // within ddp_timeout_s, never a hang
    CHECK_THAT(log, Catch::Contains("across ranks failed"));
    CHECK(json::parse(eagle::test::read_file(out / "summary.json"))["exit_reason"] == "failed");
  }
  SECTION("SIGTERM to rank 1") {
    const int port = free_port();
    const auto out = dir / "stopped";
    pid_t r0 = start_rank(0, port, args + " --output_dir " + out.string(), dir / "r0.log");
    pid_t r1 = start_rank(1, port, args + " --output_dir " + out.string(), dir / "r1.log");
    for (int i = 0; i < 1200 && logged_losses(out).size() < 2; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    REQUIRE(logged_losses(out).size() >= 2);
    kill(r1, SIGTERM);
    const int c1 = wait_exit(r1), c0 = wait_exit(r0);
    INFO(eagle::test::read_file(dir / "r0.log") << eagle::test::read_file(dir / "r1.log"));
    CHECK(c0 == 130);
    CHECK(c1 == 130);
    auto summary = json::parse(eagle::test::read_file(out / "summary.json"));
    CHECK(summary["exit_reason"] == "interrupted");
    CHECK(fs::exists(out / ("checkpoint-" + std::to_string(summary["steps"].get<int>())) / "COMPLETE"));
  }
}

TEST_CASE("ranks whose launcher is SIGKILLed stop as on SIGTERM: a checkpoint, exit 130", "[train]") {
  TempDir dir;
  const auto out = dir / "orphaned";
  const int port = free_port();
  // The launcher: a shell that starts both ranks as its children (as torchrun does) and waits.
  std::string ranks;
  for (int rank : {0, 1})
    ranks += fmt::format(
        "RANK={0} LOCAL_RANK={0} WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 "
        "MASTER_PORT={1} {2} train {3} --max_steps 400 --logging_steps 1 --save_steps 0 "
        "--output_dir {4} > {5} 2>&1 & ",
        rank, port, EAGLE_TRAIN_BIN, kSmoke, out.string(), (dir / fmt::format("r{}.log", rank)).string());
  const std::string script = "echo $$ > " + (dir / "launcher.pid").string() + "; " + ranks + "wait";
  const char* cmd = script.c_str();
  // A child that adopts the orphaned ranks (a subreaper) reaps them and exits 0 when every rank
  // exited 130, else with the first other status; between fork and exit only async-signal-safe calls.
  const pid_t reaper = ::fork();
  REQUIRE(reaper >= 0);
  if (reaper == 0) {
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    const pid_t launcher = ::fork();
    if (launcher == 0) {
      ::execl("/bin/sh", "sh", "-c", cmd, static_cast<char*>(nullptr));
      ::_exit(127);
    }
    int result = 0, status = 0;
    for (pid_t p; (p = ::waitpid(-1, &status, 0)) > 0;) {
      if (p == launcher) continue;
      const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (code != 130 && result == 0) result = code == 0 ? 1 : code;
    }
    ::_exit(result);
  }
  for (int i = 0; i < 1200 && logged_losses(out).size() < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(logged_losses(out).size() >= 2);
  const pid_t launcher = std::stoi(eagle::test::read_file(dir / "launcher.pid"));
  ::kill(launcher, SIGKILL);  // no signal is forwarded: the ranks learn it from the kernel
  const auto t0 = std::chrono::steady_clock::now();
  const int code = wait_exit(reaper);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(eagle::test::read_file(dir / "r0.log") << eagle::test::read_file(dir / "r1.log"));
  CHECK(code == 0);  // both ranks exited 130
  CHECK(waited < 60.0);
  auto summary = json::parse(eagle::test::read_file(out / "summary.json"));
  CHECK(summary["exit_reason"] == "interrupted");
  CHECK(summary["detail"] == "SIGTERM");
  CHECK(summary["steps"].get<int>() < 400);
  CHECK(fs::exists(out / ("checkpoint-" + std::to_string(summary["steps"].get<int>())) / "COMPLETE"));
}

TEST_CASE("world size 1 under torchrun with NCCL on a GPU", "[train][gpu]") {
  TempDir dir;
  auto r = eagle::test::run_command(torchrun() + " --standalone --nproc-per-node 1 --no-python " + EAGLE_TRAIN_BIN +
                                    " train " + kSmoke + " --device cuda --max_steps 4 --output_dir " +
                                    (dir / "run").string() + " 2>&1");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("nccl for tensors"));
}

TEST_CASE("ranks started with different options end with exit 2 naming the first difference", "[train]") {
  TempDir dir;
  const int port = free_port();
  const std::string args = kSmoke + " --max_steps 2 --output_dir " + (dir / "run").string();
  // Other TTT steps change the sizes of the step's collectives: a gloo abort (SIGABRT) before.
  const pid_t r0 = start_rank(0, port, args, dir / "r0.log");
  const pid_t r1 = start_rank(1, port, args + " --ttt_steps 2", dir / "r1.log");
  const int c0 = wait_exit(r0), c1 = wait_exit(r1);
  const auto log = eagle::test::read_file(dir / "r0.log") + eagle::test::read_file(dir / "r1.log");
  INFO(log);
  CHECK(c0 == 2);
  CHECK(c1 == 2);
  CHECK_THAT(log, Catch::Contains("the ranks were started differently: option ttt_steps differs") &&
                      Catch::Contains("2 on this rank"));
}
