// A recorder for the [train] tests: every operator that runs on the thread that made it, with the
// sizes, strides, dtypes and devices of its tensor inputs and the values of its other inputs
// (scalars, lists, options). Two runs of a step body that record the same lines dispatch the same
// kernels on the same shapes with the same host constants: what a CUDA graph captured from one of
// them replays for the other. On CPU, autograd runs the backward pass on the calling thread too.
#pragma once

#include <ATen/record_function.h>

#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

namespace eagle::test {

class OpTrace {
 public:
  OpTrace() {
    state().owner = std::this_thread::get_id();
    state().ops.clear();
    handle_ = at::addGlobalCallback(
        at::RecordFunctionCallback(&on_start).needsInputs(true).scopes({at::RecordScope::FUNCTION}));
  }
  ~OpTrace() { at::removeCallback(handle_); }
  OpTrace(const OpTrace&) = delete;
  OpTrace& operator=(const OpTrace&) = delete;

  // The lines so far, one per operator in the order they ran.
  const std::vector<std::string>& ops() const { return state().ops; }

 private:
  struct State {
    std::thread::id owner;
    std::vector<std::string> ops;
  };
  static State& state() {
    static State s;
    return s;
  }

  static std::string describe(const c10::IValue& v) {
    if (v.isTensor()) {
      const auto& t = v.toTensor();
      if (!t.defined()) return "T()";
      return fmt::format("T({} {} {} {})", c10::str(t.sizes()), c10::str(t.strides()), c10::toString(t.scalar_type()),
                         t.device().str());
    }
    if (v.isList()) {
      std::string out = "[";
      for (const auto& e : v.toListRef()) out += describe(e) + ",";
      return out + "]";
    }
    if (v.isTuple()) {
      std::string out = "(";
      for (const auto& e : v.toTupleRef().elements()) out += describe(e) + ",";
      return out + ")";
    }
    if (v.isDouble()) return fmt::format("{}", v.toDouble());  // shortest exact form
    if (v.isInt()) return std::to_string(v.toInt());
    if (v.isBool()) return v.toBool() ? "true" : "false";
    if (v.isNone()) return "None";
    if (v.isString()) return v.toStringRef();
    if (v.isDevice()) return v.toDevice().str();
    return v.tagKind();
  }

  static std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
    if (std::this_thread::get_id() != state().owner) return nullptr;
    std::string line = fn.name();
    line += ".";
    line += fn.overload_name();
    for (const auto& v : fn.inputs()) line += " " + describe(v);
    state().ops.push_back(std::move(line));
    return nullptr;
  }

  at::CallbackHandle handle_;
};

// The first line where two traces differ, for a failure message ("" when equal).
inline std::string first_difference(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (a[i] != b[i]) return fmt::format("operator {}:\n  {}\n  {}", i, a[i], b[i]);
  if (a.size() != b.size()) return fmt::format("{} operators against {}", a.size(), b.size());
  return "";
}

}  // namespace eagle::test
