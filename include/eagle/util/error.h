// The one error type of eagle-train: what went wrong, in which file and place, what was expected
// and found, and the fix when there is one. Thrown anywhere, caught once in main.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace eagle {

// Process exit codes (documented in docs/usage.md).
enum class ExitCode : int {
  ok = 0,
  internal = 1,        // a bug or an unexpected library failure
  usage = 2,           // a bad flag, config file or option value; a refused request
  input = 3,           // a file the tool reads is missing, malformed or inconsistent
  output = 4,          // a file or folder could not be written
  training = 5,        // training failed (non-finite loss under nan_policy error)
  gate = 6,            // a CI gate (min_ar, max_final_loss) was missed
  interrupted = 130,   // stopped by SIGINT/SIGTERM after writing a checkpoint
};

// One kind per exit code, and source_down: exit 4 as output, for a source the run reads from that
// stays down (a --target_server after its retries), which the trainer catches by kind to save the
// last completed step first. The rule for usage vs input: usage is what the user asked for (flags,
// config files, option values, a combination the tool refuses, another run holding the folder);
// input is the content of a file the tool reads (data, model, checkpoint).
enum class ErrorKind { usage, input, output, source_down, training, gate, interrupted, internal };

ExitCode exit_code_of(ErrorKind kind);

class Error : public std::exception {
 public:
  Error(ErrorKind kind, std::string message) : kind_(kind), message_(std::move(message)) {}

  // Chainable context: throw Error(ErrorKind::input, "bad loss_mask").file(p).place("line 3").
  // On a temporary the chain moves (no copy); on a named error it returns a reference.
  Error& file(std::string v) & { file_ = std::move(v); return *this; }
  Error& place(std::string v) & { place_ = std::move(v); return *this; }
  Error& expected(std::string v) & { expected_ = std::move(v); return *this; }
  Error& found(std::string v) & { found_ = std::move(v); return *this; }
  Error& hint(std::string v) & { hint_ = std::move(v); return *this; }
  Error&& file(std::string v) && { return std::move(file(std::move(v))); }
  Error&& place(std::string v) && { return std::move(place(std::move(v))); }
  Error&& expected(std::string v) && { return std::move(expected(std::move(v))); }
  Error&& found(std::string v) && { return std::move(found(std::move(v))); }
  Error&& hint(std::string v) && { return std::move(hint(std::move(v))); }

  ErrorKind kind() const { return kind_; }
  // The same error as another kind.
  Error as(ErrorKind kind) const {
    Error e = *this;
    e.kind_ = kind;
    return e;
  }
  ExitCode exit_code() const { return exit_code_of(kind_); }
  const std::string& message() const { return message_; }
  const std::string& file() const & { return file_; }
  const std::string& place() const & { return place_; }
  const std::string& expected() const & { return expected_; }
  const std::string& found() const & { return found_; }
  const std::string& hint() const & { return hint_; }

  // "FILE: PLACE: MESSAGE: expected E, found F (hint: H)", omitting empty parts.
  std::string format() const;
  const char* what() const noexcept override;

 private:
  ErrorKind kind_;
  std::string message_, file_, place_, expected_, found_, hint_;
  mutable std::string what_;
};

// The one check macro: EAGLE_CHECK(cond, Error(...).file(...)) throws the error when cond is false.
#define EAGLE_CHECK(cond, ...)   \
  do {                           \
    if (!(cond)) throw __VA_ARGS__; \
  } while (0)

}  // namespace eagle
