// A probe for the [train] and [gpu] tests: counts, on every thread, the operators that make a CUDA
// device wait for the host (a value read back, a data-dependent output shape, a device-to-host
// copy). A step body the probe finds clean on CPU contains none of them, so on a GPU it can be
// captured in a CUDA graph; it runs on CPU, where nothing else would notice.
#pragma once

#include <ATen/record_function.h>

#include <atomic>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace eagle::test {

class HostSyncProbe {
 public:
  // exempt: operators whose own work is not counted, for CPU kernels that read a CPU tensor where
  // their CUDA kernel reads it on the device (e.g. aten::_fused_adamw_ reads lr and step).
  explicit HostSyncProbe(std::vector<std::string> exempt = {}) {
    state().count = 0;
    {
      std::lock_guard<std::mutex> lock(state().mutex);
      state().names.clear();
      state().exempt = std::move(exempt);
    }
    // Global, not thread-local: autograd runs CUDA backward work on its own threads.
    handle_ = at::addGlobalCallback(
        at::RecordFunctionCallback(&on_start, &on_end).needsInputs(true).scopes({at::RecordScope::FUNCTION}));
  }
  ~HostSyncProbe() { at::removeCallback(handle_); }
  HostSyncProbe(const HostSyncProbe&) = delete;
  HostSyncProbe& operator=(const HostSyncProbe&) = delete;

  int count() const { return state().count.load(); }
  std::string names() const {
    std::lock_guard<std::mutex> lock(state().mutex);
    std::string out;
    for (const auto& n : state().names) out += (out.empty() ? "" : ", ") + n;
    return out;
  }

 private:
  struct State {
    std::atomic<int> count{0};
    std::mutex mutex;
    std::vector<std::string> names, exempt;
  };
  static int& exempt_depth() {
    thread_local int depth = 0;
    return depth;
  }
  static bool is_exempt(const at::RecordFunction& fn) {
    std::lock_guard<std::mutex> lock(state().mutex);
    for (const auto& e : state().exempt)
      if (fn.name() == e) return true;
    return false;
  }
  static State& state() {
    static State s;
    return s;
  }

  static bool syncs(const at::RecordFunction& fn) {
    static constexpr std::string_view kAlways[] = {
        "aten::_local_scalar_dense",  // item(), operator bool, Scalar conversion
        "aten::nonzero",              // also boolean-mask indexing
        "aten::masked_select",
        "aten::_unique2",
        "aten::unique_consecutive",
        "aten::unique_dim",
        "aten::is_nonzero",
        "aten::equal",
        "aten::bincount",
        "aten::repeat_interleave",  // without output_size its result size is read back
    };
    const std::string_view name = fn.name();
    for (auto n : kAlways)
      if (name == n) return true;
    // A copy between the host and a device (the destination is the first input of copy_).
    if (name == "aten::copy_") {
      const auto inputs = fn.inputs();
      if (inputs.size() >= 2 && inputs[0].isTensor() && inputs[1].isTensor()) {
        const auto a = inputs[0].toTensor().device(), b = inputs[1].toTensor().device();
        return a != b && (a.is_cpu() || b.is_cpu());
      }
    }
    return false;
  }

  static std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
    if (is_exempt(fn)) ++exempt_depth();
    if (exempt_depth() == 0 && syncs(fn)) {
      state().count.fetch_add(1);
      std::lock_guard<std::mutex> lock(state().mutex);
      state().names.emplace_back(fn.name());
    }
    return nullptr;
  }
  static void on_end(const at::RecordFunction& fn, at::ObserverContext*) {
    if (is_exempt(fn)) --exempt_depth();
  }

  at::CallbackHandle handle_;
};

}  // namespace eagle::test
