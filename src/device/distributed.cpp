// The c10d process groups of a torchrun launch and the trainer's collectives (see distributed.h).
#include "eagle/device/distributed.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef EAGLE_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>

#include "eagle/util/error.h"
#include "eagle/util/log.h"

namespace eagle::device {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

int env_int(const char* name, int fallback, int lo) {
  const std::string text = env(name);
  if (text.empty()) return fallback;
  int v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  EAGLE_CHECK(ec == std::errc() && ptr == text.data() + text.size() && v >= lo,
              Error(ErrorKind::usage, "a launcher variable is not a valid number")
                  .place(name)
                  .expected(fmt::format("an integer >= {}", lo))
                  .found(text));
  return v;
}

// A failed collective: another rank stopped (died, or was killed) or the network failed.
template <typename F>
auto collective(const char* what, std::chrono::seconds timeout, F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    throw Error(ErrorKind::training, fmt::format("the {} across ranks failed", what))
        .found(e.what())
        .hint(fmt::format("another rank stopped or the network failed; ddp_timeout_s ({} s) bounds every wait",
                          timeout.count()));
  }
}

}  // namespace

LaunchInfo launch_from_env() {
  LaunchInfo info;
  if (env("RANK").empty() && env("WORLD_SIZE").empty()) return info;
  info.launched = true;
  info.world_size = env_int("WORLD_SIZE", 1, 1);
  info.rank = env_int("RANK", 0, 0);
  info.local_rank = env_int("LOCAL_RANK", info.rank, 0);
  info.local_world_size = env_int("LOCAL_WORLD_SIZE", info.world_size, 1);
  info.restart_count = env_int("TORCHELASTIC_RESTART_COUNT", 0, 0);
  info.agent_store = env("TORCHELASTIC_USE_AGENT_STORE") == "True";
  EAGLE_CHECK(info.rank < info.world_size, Error(ErrorKind::usage, "RANK is not below WORLD_SIZE")
                                               .place("RANK")
                                               .expected(fmt::format("0 .. {}", info.world_size - 1))
                                               .found(std::to_string(info.rank)));
  info.master_addr = env("MASTER_ADDR");
  EAGLE_CHECK(!info.master_addr.empty(), Error(ErrorKind::usage, "a distributed launch needs MASTER_ADDR")
                                             .place("MASTER_ADDR")
                                             .hint("launch with torchrun"));
  info.master_port = env_int("MASTER_PORT", 0, 1);
  EAGLE_CHECK(info.master_port > 0 && info.master_port < 65536,
              Error(ErrorKind::usage, "a distributed launch needs MASTER_PORT")
                  .place("MASTER_PORT")
                  .expected("a port in 1 .. 65535")
                  .hint("launch with torchrun"));
  return info;
}

torch::Device device_for(const LaunchInfo& launch, torch::Device resolved, const std::string& requested) {
  if (!launch.launched || !resolved.is_cuda() || requested.rfind("cuda:", 0) == 0) return resolved;
  EAGLE_CHECK(launch.local_rank < static_cast<int>(torch::cuda::device_count()),
              Error(ErrorKind::usage, "LOCAL_RANK has no GPU")
                  .place("LOCAL_RANK")
                  .expected(fmt::format("< {} (the GPUs of this node)", torch::cuda::device_count()))
                  .found(std::to_string(launch.local_rank)));
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(launch.local_rank));
}

FlatGradients bind_flat_gradients(const std::vector<std::pair<std::string, torch::Tensor>>& params, std::int64_t extra,
                                  torch::Device device) {
  std::int64_t numel = 0;
  for (const auto& [name, p] : params) numel += p.numel();
  FlatGradients g;
  g.buffer = torch::zeros({numel + extra}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
  std::int64_t offset = 0;
  for (const auto& [name, p] : params) {
    p.mutable_grad() = g.buffer.narrow(0, offset, p.numel()).view_as(p);
    offset += p.numel();
  }
  g.extra = g.buffer.narrow(0, numel, extra);
  return g;
}

struct ProcessGroup::Groups {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> host;    // Gloo: host values
  c10::intrusive_ptr<c10d::Backend> device;  // NCCL on CUDA, else the Gloo group
  torch::Device tensor_device{torch::kCPU};
  bool nccl = false;  // device tensors go through NCCL (its wait() does not block the host)
};

ProcessGroup::ProcessGroup(const LaunchInfo& info, torch::Device device, config::DdpBackend backend,
                           std::chrono::seconds timeout)
    : rank_(info.rank), size_(info.world_size), timeout_(timeout) {
  if (!info.launched) return;
  EAGLE_CHECK(backend != config::DdpBackend::nccl || device.is_cuda(),
              Error(ErrorKind::usage, "ddp_backend nccl reduces CUDA tensors only")
                  .place("ddp_backend")
                  .expected("--device cuda, or ddp_backend auto or gloo")
                  .found(device.str()));
  groups_ = std::make_unique<Groups>();
  auto& g = *groups_;
  const std::chrono::milliseconds ms(timeout);
  collective("joining of the process group", timeout_, [&] {
    // The store as torch.distributed makes it: torchrun's agent hosts it (every rank a client), else
    // rank 0 does; keys under default_pg/<restart>/ so an earlier attempt's keys are never read.
    c10d::TCPStoreOptions so;
    so.port = static_cast<std::uint16_t>(info.master_port);
    so.isServer = !info.agent_store && info.rank == 0;
    so.numWorkers = static_cast<std::size_t>(info.world_size);
    so.waitWorkers = true;
    so.multiTenant = !info.agent_store;
    so.timeout = ms;
    auto tcp = c10::make_intrusive<c10d::TCPStore>(info.master_addr, so);
    g.store = c10::make_intrusive<c10d::PrefixStore>(fmt::format("default_pg/{}", info.restart_count), tcp);
    // Gloo honours GLOO_SOCKET_IFNAME (multi-node: the interface the ranks reach each other on).
    auto gloo_options = c10d::ProcessGroupGloo::Options::create_default(ms);
    g.host = c10::make_intrusive<c10d::ProcessGroupGloo>(c10::make_intrusive<c10d::PrefixStore>("cpu", g.store),
                                                         info.rank, info.world_size, gloo_options);
    g.device = g.host;
    g.tensor_device = torch::kCPU;
    if (device.is_cuda() && backend != config::DdpBackend::gloo) {
#ifdef EAGLE_WITH_CUDA
      c10::cuda::set_device(device.index());
      auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
      nccl_options->timeout = ms;
      g.device = c10::make_intrusive<c10d::ProcessGroupNCCL>(c10::make_intrusive<c10d::PrefixStore>("cuda", g.store),
                                                             info.rank, info.world_size, nccl_options);
      g.nccl = true;
#endif
      g.tensor_device = device;
    } else if (device.is_cuda()) {
      g.tensor_device = device;  // Gloo reduces CUDA tensors too (through host memory)
    }
    return 0;
  });
  log::info("dist", "rank {} of {} (local {} of {}), {} for tensors, gloo for host values, timeout {} s", rank_, size_,
            info.local_rank, info.local_world_size, g.nccl ? "nccl" : "gloo", timeout.count());
}

ProcessGroup::~ProcessGroup() = default;

void ProcessGroup::sum(torch::Tensor& t) {
  if (!groups_) return;
  collective("sum of gradients and metrics", timeout_, [&] {
    std::vector<torch::Tensor> list{t};
    c10d::AllreduceOptions opts;
    opts.timeout = timeout_;
    auto work = groups_->device->allreduce(list, opts);
    // NCCL: wait() orders the current stream after the collective without blocking the host (its
    // watchdog enforces the timeout); a wait with a timeout would synchronise every step.
    return groups_->nccl ? work->wait() : work->wait(timeout_);
  });
}

std::vector<std::int64_t> ProcessGroup::sum(std::vector<std::int64_t> values) {
  if (!groups_ || values.empty()) return values;
  auto t = torch::tensor(values, torch::kInt64);
  collective("sum of host counts", timeout_, [&] {
    std::vector<torch::Tensor> list{t};
    c10d::AllreduceOptions opts;
    opts.timeout = timeout_;
    return groups_->host->allreduce(list, opts)->wait(timeout_);
  });
  const auto* p = t.data_ptr<std::int64_t>();
  return std::vector<std::int64_t>(p, p + t.numel());
}

bool ProcessGroup::any(bool flag) { return sum(std::vector<std::int64_t>{flag ? 1 : 0})[0] > 0; }

std::int64_t ProcessGroup::broadcast_from_main(std::int64_t value) {
  return sum(std::vector<std::int64_t>{is_main() ? value : 0})[0];
}

void ProcessGroup::barrier() {
  if (!groups_) return;
  collective("barrier", timeout_, [&] {
    c10d::BarrierOptions opts;
    opts.timeout = timeout_;
    return groups_->host->barrier(opts)->wait(timeout_);
  });
}

}  // namespace eagle::device
