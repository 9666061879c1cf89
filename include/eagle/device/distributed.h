// Data parallelism on PyTorch's own engine (c10d): the process group of a torchrun launch, or none
// for a single process, and the few collectives the trainer needs (docs/distributed.md). Host
// values (loss denominators, token counts, the stop decision, the exit code) go through a Gloo
// group; device tensors (gradients, metric sums) through NCCL on CUDA, the same Gloo group on CPU.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "eagle/config/options.h"

namespace eagle::device {

// What torchrun (or a scheduler doing the same) put in the environment.
struct LaunchInfo {
  int rank = 0, world_size = 1;
  int local_rank = 0, local_world_size = 1;
  std::string master_addr;
  int master_port = 0;
  bool agent_store = false;  // TORCHELASTIC_USE_AGENT_STORE=True: torchrun's agent hosts the store
  int restart_count = 0;     // TORCHELASTIC_RESTART_COUNT (keys of an earlier attempt are not read)
  bool launched = false;     // started by a launcher (RANK or WORLD_SIZE set): a real process group,
                             // also for a world of one
};

// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and TORCHELASTIC_*.
// Neither RANK nor WORLD_SIZE set: one process. A malformed or inconsistent value: Error(usage)
// naming the variable.
LaunchInfo launch_from_env();

// The device of this rank: `requested` as resolved, except that a launched rank asked for plain
// "cuda" or "auto" on a GPU trains on its node's GPU LOCAL_RANK (Error(usage) when the node has
// no such GPU).
torch::Device device_for(const LaunchInfo& launch, torch::Device resolved, const std::string& requested);

// One flat fp32 buffer on the device holding every parameter's gradient (each .grad becomes a view
// into it), followed by `extra` values: summing the buffer over the ranks is one collective on one
// tensor, and no gradient is ever copied.
struct FlatGradients {
  torch::Tensor buffer;  // [numel of all parameters + extra]
  torch::Tensor extra;   // the last `extra` elements, a view
};
FlatGradients bind_flat_gradients(const std::vector<std::pair<std::string, torch::Tensor>>& params, std::int64_t extra,
                                  torch::Device device);

class ProcessGroup {
 public:
  // Joins the group of `info` (a process that no launcher started joins nothing: every collective is
  // the identity).
  // Device tensors use NCCL on CUDA with ddp_backend auto or nccl, else Gloo; timeout bounds joining
  // and every collective, so a dead rank ends the others with an error instead of a hang.
  ProcessGroup(const LaunchInfo& info, torch::Device device, config::DdpBackend backend, std::chrono::seconds timeout);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool is_main() const { return rank_ == 0; }

  // Sums a device tensor over the ranks, in place (one collective; pass flat buffers).
  void sum(torch::Tensor& t);
  // Host values: sums, a logical or, rank 0's value.
  std::vector<std::int64_t> sum(std::vector<std::int64_t> values);
  bool any(bool flag);
  std::int64_t broadcast_from_main(std::int64_t value);
  void barrier();

 private:
  struct Groups;
  int rank_ = 0, size_ = 1;
  std::chrono::seconds timeout_;
  std::unique_ptr<Groups> groups_;
};

}  // namespace eagle::device
