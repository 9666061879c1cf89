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
  bool distributed() const { return world_size > 1; }
};

// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and TORCHELASTIC_*.
// Neither RANK nor WORLD_SIZE set: one process. A malformed or inconsistent value: Error(usage)
// naming the variable.
LaunchInfo launch_from_env();

enum class Backend { auto_, gloo, nccl };

class ProcessGroup {
 public:
  // Joins the group of `info` (a process that no launcher started joins nothing: every collective is
  // the identity).
  // Device tensors use NCCL on CUDA with Backend::auto_ or nccl, else Gloo; timeout bounds joining
  // and every collective, so a dead rank ends the others with an error instead of a hang.
  ProcessGroup(const LaunchInfo& info, torch::Device device, Backend backend, std::chrono::seconds timeout);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool is_main() const { return rank_ == 0; }
  const char* device_backend() const;  // "gloo", "nccl" or "none"

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
