// The option table: every eagle-train option, declared once (see declare_options at the bottom).
#include "eagle/config/option_table.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <array>
#include <deque>
#include <limits>
#include <optional>

#include "eagle/util/error.h"

namespace eagle::config {
namespace {

using json = nlohmann::json;

// ----- names of enum values, as written in flags and JSON -----
template <typename E>
struct EnumNames;
template <>
struct EnumNames<LrScheduler> {
  static constexpr std::array<std::pair<const char*, LrScheduler>, 3> v{
      {{"cosine", LrScheduler::cosine}, {"linear", LrScheduler::linear}, {"constant", LrScheduler::constant}}};
};
template <>
struct EnumNames<BadSamplePolicy> {
  static constexpr std::array<std::pair<const char*, BadSamplePolicy>, 2> v{
      {{"error", BadSamplePolicy::error}, {"skip", BadSamplePolicy::skip}}};
};
template <>
struct EnumNames<OverlongPolicy> {
  static constexpr std::array<std::pair<const char*, OverlongPolicy>, 2> v{
      {{"truncate", OverlongPolicy::truncate}, {"drop", OverlongPolicy::drop}}};
};
template <>
struct EnumNames<NanPolicy> {
  static constexpr std::array<std::pair<const char*, NanPolicy>, 2> v{
      {{"error", NanPolicy::error}, {"skip", NanPolicy::skip}}};
};
template <>
struct EnumNames<TargetDtype> {
  static constexpr std::array<std::pair<const char*, TargetDtype>, 4> v{{{"auto", TargetDtype::auto_},
                                                                         {"float32", TargetDtype::float32},
                                                                         {"bfloat16", TargetDtype::bfloat16},
                                                                         {"float16", TargetDtype::float16}}};
};
template <>
struct EnumNames<ExportFormat> {
  static constexpr std::array<std::pair<const char*, ExportFormat>, 3> v{
      {{"sglang", ExportFormat::sglang},
       {"speculators", ExportFormat::speculators},
       {"vllm-eagle1", ExportFormat::vllm_eagle1}}};
};

template <typename E>
std::string enum_choices() {
  std::string out;
  for (const auto& [name, value] : EnumNames<E>::v) out += (out.empty() ? "" : "|") + std::string(name);
  return out;
}
template <typename E>
std::optional<E> enum_parse(std::string_view s) {
  for (const auto& [name, value] : EnumNames<E>::v)
    if (s == name) return value;
  return std::nullopt;
}
template <typename E>
std::string enum_name(E e) {
  for (const auto& [name, value] : EnumNames<E>::v)
    if (value == e) return name;
  return "?";
}

// ----- codecs: JSON <-> field, CLI11 binding, type name for docs -----
Error type_error(const std::string& source, const std::string& key, const std::string& expected,
                 const json& found) {
  return Error(ErrorKind::usage, "wrong type").file(source).place(fmt::format("key \"{}\"", key))
      .expected(expected).found(found.dump());
}

template <typename T, typename = void>
struct Codec;

template <>
struct Codec<bool> {
  static std::string type() { return "bool"; }
  static json to(bool v) { return v; }
  static bool from(const json& j, const std::string& src, const std::string& key) {
    if (!j.is_boolean()) throw type_error(src, key, "true or false", j);
    return j.get<bool>();
  }
  static CLI::Option* bind(CLI::App& app, const std::string& flag, bool& v) {
    return app.add_flag(flag, v)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }
};

template <>
struct Codec<std::int64_t> {
  static std::string type() { return "int"; }
  static json to(std::int64_t v) { return v; }
  static std::int64_t from(const json& j, const std::string& src, const std::string& key) {
    if (!j.is_number_integer()) throw type_error(src, key, "an integer", j);
    return j.get<std::int64_t>();
  }
  static CLI::Option* bind(CLI::App& app, const std::string& flag, std::int64_t& v) {
    return app.add_option(flag, v)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }
};

template <>
struct Codec<double> {
  static std::string type() { return "float"; }
  static json to(double v) { return v; }
  static double from(const json& j, const std::string& src, const std::string& key) {
    if (!j.is_number() || j.is_boolean()) throw type_error(src, key, "a number", j);
    return j.get<double>();
  }
  static CLI::Option* bind(CLI::App& app, const std::string& flag, double& v) {
    return app.add_option(flag, v)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }
};

template <>
struct Codec<std::string> {
  static std::string type() { return "string"; }
  static json to(const std::string& v) { return v; }
  static std::string from(const json& j, const std::string& src, const std::string& key) {
    if (!j.is_string()) throw type_error(src, key, "a string", j);
    return j.get<std::string>();
  }
  static CLI::Option* bind(CLI::App& app, const std::string& flag, std::string& v) {
    return app.add_option(flag, v)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }
};

template <typename T>
struct Codec<std::vector<T>> {
  static std::string type() { return "list of " + Codec<T>::type(); }
  static json to(const std::vector<T>& v) {
    json out = json::array();
    for (const auto& x : v) out.push_back(Codec<T>::to(x));
    return out;
  }
  static std::vector<T> from(const json& j, const std::string& src, const std::string& key) {
    if (!j.is_array()) throw type_error(src, key, "a list of " + Codec<T>::type(), j);
    std::vector<T> out;
    for (std::size_t i = 0; i < j.size(); ++i)
      out.push_back(Codec<T>::from(j[i], src, fmt::format("{}[{}]", key, i)));
    return out;
  }
  static CLI::Option* bind(CLI::App& app, const std::string& flag, std::vector<T>& v) {
    return app.add_option(flag, v)->delimiter(',');
  }
};

template <typename E>
struct Codec<E, std::enable_if_t<std::is_enum_v<E>>> {
  static std::string type() { return enum_choices<E>(); }
  static json to(E v) { return enum_name(v); }
  static E from(const json& j, const std::string& src, const std::string& key) {
    if (!j.is_string()) throw type_error(src, key, "one of " + enum_choices<E>(), j);
    auto v = enum_parse<E>(j.get<std::string>());
    if (!v) throw type_error(src, key, "one of " + enum_choices<E>(), j);
    return *v;
  }
  static CLI::Option* bind(CLI::App& app, const std::string& flag, E& v) {
    return app.add_option_function<std::string>(flag, [&v, flag](const std::string& s) {
      auto parsed = enum_parse<E>(s);
      if (!parsed) throw CLI::ValidationError(flag, "expected one of " + enum_choices<E>() + ", found \"" + s + "\"");
      v = *parsed;
    })->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }
};

// ----- the builder used by declare_options -----
template <typename T>
bool value_is_set(const T& v) {
  if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, std::vector<std::int64_t>> ||
                std::is_same_v<T, std::vector<std::string>>)
    return !v.empty();
  else
    return true;
}

// The entry being declared, typed by its field, so that each later call names the field no more.
template <typename T>
class Entry {
 public:
  Entry(OptionEntry& e, T Options::*field) : e_(e), field_(field) {}

  // Numeric range, inclusive; applies to each element of a list.
  Entry& range(double lo, double hi = std::numeric_limits<double>::infinity()) {
    std::string what = describe_range(lo, hi);
    e_.check = [field = field_, lo, hi, what](const Options& o) {
      return in_range(o.*field, lo, hi) ? std::string() : what;
    };
    return *this;
  }
  // A custom check of the value (the other options given for context): "" or what is expected.
  Entry& check(std::function<std::string(const T&, const Options&)> f) {
    e_.check = [field = field_, f = std::move(f)](const Options& o) { return f(o.*field, o); };
    return *this;
  }
  // The subcommands that cannot run without it (or without `alternative`, when that is given).
  Entry& required(CommandMask commands, std::string alternative = "") {
    e_.required.push_back({commands, std::move(alternative)});
    return *this;
  }
  Entry& not_in_config() {
    e_.in_config = false;
    return *this;
  }

 private:
  static std::string describe_range(double lo, double hi) {
    constexpr bool is_int = std::is_same_v<T, std::int64_t> || std::is_same_v<T, std::vector<std::int64_t>>;
    std::string kind = is_int ? "an integer" : "a number";
    if constexpr (!std::is_arithmetic_v<T>) kind = "a list of " + std::string(is_int ? "integers" : "numbers");
    auto num = [](double x) { return fmt::format("{}", x); };
    if (hi == std::numeric_limits<double>::infinity()) return fmt::format("{} >= {}", kind, num(lo));
    return fmt::format("{} in [{}, {}]", kind, num(lo), num(hi));
  }
  template <typename V>
  static bool in_range(const V& v, double lo, double hi) {
    if constexpr (std::is_arithmetic_v<V>) {
      return static_cast<double>(v) >= lo && static_cast<double>(v) <= hi;
    } else {
      for (const auto& x : v)
        if (!in_range(x, lo, hi)) return false;
      return true;
    }
  }
  OptionEntry& e_;
  T Options::*field_;
};

class Table {
 public:
  template <typename T>
  Entry<T> add(T Options::*field, std::string name, Group group, CommandMask commands, std::string help) {
    OptionEntry& e = entries_.emplace_back();
    e.name = std::move(name);
    e.group = group;
    e.commands = commands;
    e.help = std::move(help);
    e.type = Codec<T>::type();
    e.default_text = Codec<T>::to(Options{}.*field).dump();
    e.to_json = [field](const Options& o) { return Codec<T>::to(o.*field); };
    e.from_json = [field, key = e.name](Options& o, const json& j, const std::string& src) {
      o.*field = Codec<T>::from(j, src, key);
    };
    e.add_flag = [field, flag = "--" + e.name, help = e.help](CLI::App& app, Options& o) {
      return Codec<T>::bind(app, flag, o.*field)->description(help);
    };
    e.copy = [field](Options& dst, const Options& src) { dst.*field = src.*field; };
    e.check = [](const Options&) { return std::string(); };
    e.is_set = [field](const Options& o) { return value_is_set(o.*field); };
    return Entry<T>(e, field);
  }
  std::vector<OptionEntry> take() {
    return {std::make_move_iterator(entries_.begin()), std::make_move_iterator(entries_.end())};
  }

 private:
  std::deque<OptionEntry> entries_;  // stable addresses while an Entry refers to the newest
};

constexpr CommandMask kTrain = mask(Command::train);
constexpr CommandMask kPrepare = mask(Command::prepare);
constexpr CommandMask kStats = mask(Command::data_stats);
constexpr CommandMask kInspect = mask(Command::inspect);
constexpr CommandMask kExport = mask(Command::export_);
constexpr CommandMask kEval = mask(Command::eval);
constexpr CommandMask kGenerate = mask(Command::generate);
constexpr CommandMask kAll = kTrain | kPrepare | kStats | kInspect | kExport | kEval | kGenerate;

std::string check_increasing(const std::vector<std::int64_t>& v) {
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i] < 1) return "positive lengths";
    if (i > 0 && v[i] <= v[i - 1]) return "strictly increasing lengths";
  }
  return "";
}

std::vector<OptionEntry> declare_options() {
  Table t;
  using G = Group;
  // data
  t.add(&Options::data_path, "data_path", G::data, kTrain | kStats | kEval | kGenerate,
        "Training data: a prepared dataset folder (eagle-train prepare), a .jsonl/.json file "
        "(optionally .gz), or a folder of them; generate: the samples whose replies are regenerated "
        "(of a prepared folder, its train split)")
      .required(kTrain | kStats | kGenerate)
      .required(kEval, "eval_data_path");
  t.add(&Options::eval_data_path, "eval_data_path", G::data, kTrain | kEval,
        "Held-out data for evaluation, same formats as data_path; empty: the validation split of a "
        "prepared data_path");
  t.add(&Options::training_seq_len, "training_seq_len", G::data, kTrain | kPrepare | kStats | kEval | kGenerate,
        "Maximum tokens per sample; longer samples follow overlong_policy; generate: the context, prompts "
        "and replies together")
      .range(4, 1 << 20);
  t.add(&Options::bucket_granularity, "bucket_granularity", G::data, kTrain | kStats,
        "Each batch is padded to its longest sample rounded up to a multiple of this many tokens "
        "(capped at training_seq_len); 0: pad every batch to training_seq_len")
      .range(0);
  t.add(&Options::bucket_boundaries, "bucket_boundaries", G::data, kTrain | kStats,
        "Explicit bucket lengths in tokens, strictly increasing (a batch is padded to the smallest "
        "one that fits); empty: use bucket_granularity")
      .check([](const std::vector<std::int64_t>& v, const Options&) { return check_increasing(v); });
  t.add(&Options::group_by_length, "group_by_length", G::data, kTrain | kStats,
        "Group samples of similar length into batches (seeded shuffle, then sort within a window of "
        "batches); false: plain random order");
  t.add(&Options::padding_free, "padding_free", G::data, kTrain | kStats,
        "Pack samples into rows without padding; attention and TTT chains never cross samples");
  t.add(&Options::max_tokens_per_batch, "max_tokens_per_batch", G::data, kTrain | kStats,
        "Fill each micro-batch up to this many tokens, padding counted; 0: a fixed "
        "per_device_train_batch_size rows")
      .check([](std::int64_t v, const Options& o) {
        // A batch must hold one sample of training_seq_len tokens.
        return v == 0 || v >= o.training_seq_len
                   ? std::string()
                   : fmt::format("0 or an integer >= training_seq_len ({})", o.training_seq_len);
      });
  t.add(&Options::bad_sample_policy, "bad_sample_policy", G::data, kTrain | kPrepare | kStats | kEval | kGenerate,
        "A malformed sample: error stops at the first, skip counts them and logs the first few");
  t.add(&Options::overlong_policy, "overlong_policy", G::data, kTrain | kPrepare | kStats | kEval | kGenerate,
        "A sample longer than training_seq_len: truncate it, or drop it (counted and logged); generate: "
        "a turn whose prompt does not fit ends the sample before it (truncate) or drops the sample (drop)");
  t.add(&Options::validation_fraction, "validation_fraction", G::data, kTrain | kPrepare,
        "Fraction of samples held out as the validation split (seeded by seed); 0: none")
      .range(0.0, 0.5);
  t.add(&Options::input, "input", G::data, kPrepare,
        "prepare: input .jsonl/.json files (optionally .gz) or folders of them")
      .required(kPrepare);
  t.add(&Options::output, "output", G::data, kPrepare | kExport | kEval | kGenerate,
        "prepare: the dataset folder to write; export: the head folder to write; eval: a JSON file "
        "to write the result to; generate: the .jsonl file to write")
      .required(kPrepare | kExport | kGenerate);
  t.add(&Options::json, "json", G::log, kStats | kInspect | kEval, "Print the result as JSON");
  // model
  t.add(&Options::model_name_or_path, "model_name_or_path", G::model, kTrain | kInspect | kEval | kGenerate,
        "Target model folder in the Hugging Face layout (config.json, *.safetensors)")
      .required(kTrain | kInspect | kEval | kGenerate);
  t.add(&Options::target_dtype, "target_dtype", G::model, kTrain | kInspect | kEval | kGenerate,
        "Dtype of the frozen target's weights and forward; auto: the checkpoint's dtype");
  t.add(&Options::aux_hidden_state_layer_ids, "aux_hidden_state_layer_ids", G::model,
        kTrain | kInspect | kEval,
        "EAGLE-3 target layers whose inputs are fused, input-of-layer convention "
        "(hidden_states[id]); empty: [2, L/2, L-3] (models under 7 layers: docs/models.md)")
      .range(0);
  // draft
  t.add(&Options::eagle_version, "eagle_version", G::draft, kTrain | kEval | kExport,
        "Draft head: 3 (EAGLE-3, three fused layers, training-time test) or 1 (EAGLE-1)")
      .check([](std::int64_t v, const Options&) { return v == 1 || v == 3 ? "" : "1 or 3"; });
  t.add(&Options::ttt_steps, "ttt_steps", G::draft, kTrain | kEval,
        "Training-time test steps: how far the head is unrolled on its own outputs")
      .range(1, 32);
  t.add(&Options::ttt_loss_decay, "ttt_loss_decay", G::draft, kTrain,
        "Weight of TTT step k's loss is ttt_loss_decay^k")
      .range(0.0, 1.0);
  t.add(&Options::draft_vocab_size, "draft_vocab_size", G::draft, kTrain,
        "Tokens in the draft vocabulary, the most frequent trained tokens; capped at the target's "
        "vocabulary")
      .range(2);
  // train
  t.add(&Options::per_device_train_batch_size, "per_device_train_batch_size", G::train, kTrain | kStats,
        "Rows per micro-batch (when max_tokens_per_batch is 0)")
      .range(1);
  t.add(&Options::gradient_accumulation_steps, "gradient_accumulation_steps", G::train, kTrain,
        "Micro-batches per optimizer step")
      .range(1);
  t.add(&Options::max_steps, "max_steps", G::train, kTrain,
        "Optimizer steps to train; 0: num_train_epochs decides")
      .range(0);
  t.add(&Options::num_train_epochs, "num_train_epochs", G::train, kTrain,
        "Passes over the training data (fractions allowed), used when max_steps is 0")
      .range(0.0);
  t.add(&Options::bf16, "bf16", G::train, kTrain | kEval,
        "Run the head's forward and backward under bf16 autocast (weights and optimizer stay fp32)");
  t.add(&Options::nan_policy, "nan_policy", G::train, kTrain,
        "A non-finite loss or gradient: error stops the run naming the step; skip skips the update "
        "and goes on");
  t.add(&Options::max_cuda_graphs, "max_cuda_graphs", G::train, kTrain | kGenerate,
        "Batch shapes captured as CUDA graphs on GPU; others run eagerly; 0: none (generate: decode "
        "steps, one shape per 256 cached columns)")
      .range(0);
  t.add(&Options::seed, "seed", G::train, kAll,
        "Seed of every random choice (data order, splits, init, generate's sampling)")
      .range(0);
  // optim
  t.add(&Options::learning_rate, "learning_rate", G::optim, kTrain, "Peak AdamW learning rate")
      .range(0.0);
  t.add(&Options::lr_scheduler_type, "lr_scheduler_type", G::optim, kTrain,
        "Learning-rate schedule after the linear warmup");
  t.add(&Options::warmup_steps, "warmup_steps", G::optim, kTrain,
        "Optimizer steps of linear warmup from 0 to learning_rate")
      .range(0);
  t.add(&Options::weight_decay, "weight_decay", G::optim, kTrain, "AdamW decoupled weight decay")
      .range(0.0);
  t.add(&Options::adam_beta1, "adam_beta1", G::optim, kTrain, "AdamW beta1").range(0.0, 1.0);
  t.add(&Options::adam_beta2, "adam_beta2", G::optim, kTrain, "AdamW beta2").range(0.0, 1.0);
  t.add(&Options::adam_epsilon, "adam_epsilon", G::optim, kTrain, "AdamW epsilon")
      .range(0.0);
  t.add(&Options::max_grad_norm, "max_grad_norm", G::optim, kTrain,
        "Clip the global gradient L2 norm to this; 0: no clipping")
      .range(0.0);
  // eval
  t.add(&Options::eval_steps, "eval_steps", G::eval, kTrain,
        "Evaluate every this many optimizer steps; 0: only at the end")
      .range(0);
  t.add(&Options::eval_num_prompts, "eval_num_prompts", G::eval, kTrain | kEval,
        "Held-out prompts decoded speculatively to measure the acceptance rate; 0: skip it")
      .range(0);
  t.add(&Options::eval_max_new_tokens, "eval_max_new_tokens", G::eval, kTrain | kEval,
        "Tokens generated per evaluation prompt (stops earlier at the target's eos)")
      .range(1);
  t.add(&Options::eval_draft_len, "eval_draft_len", G::eval, kTrain | kEval,
        "Tokens the head drafts per round in the acceptance evaluation; 0: ttt_steps")
      .range(0, 32);
  t.add(&Options::min_ar, "min_ar", G::eval, kTrain | kEval,
        "CI gate: exit non-zero when the final acceptance rate is below this; 0: no gate")
      .range(0.0);
  t.add(&Options::max_final_loss, "max_final_loss", G::eval, kTrain,
        "CI gate: exit non-zero when the final training loss is above this; 0: no gate")
      .range(0.0);
  // generate
  t.add(&Options::max_new_tokens, "max_new_tokens", G::generate, kGenerate,
        "Tokens the target writes per reply at most, its end-of-turn id included")
      .range(1);
  t.add(&Options::temperature, "temperature", G::generate, kGenerate,
        "Sampling temperature of the regenerated replies; 0: greedy (the target's most likely token)")
      .range(0.0, 100.0);
  t.add(&Options::top_p, "top_p", G::generate, kGenerate,
        "Sample from the smallest set of tokens whose probability reaches top_p (with temperature > 0); "
        "1: the whole vocabulary")
      .check([](double v, const Options&) { return v > 0.0 && v <= 1.0 ? "" : "a number in (0, 1]"; });
  t.add(&Options::generate_batch_size, "generate_batch_size", G::generate, kGenerate,
        "Sequences generated together (rows of the KV cache); a finished row takes the next sample")
      .range(1, 4096);
  // log
  t.add(&Options::logging_steps, "logging_steps", G::log, kTrain,
        "Log a step line and metrics every this many optimizer steps")
      .range(1);
  t.add(&Options::log_level, "log_level", G::log, kAll, "Console log level: trace|debug|info|warn|error|off")
      .check([](const std::string& v, const Options&) {
        for (const char* l : {"trace", "debug", "info", "warn", "error", "off"})
          if (v == l) return std::string();
        return std::string("one of trace|debug|info|warn|error|off");
      });
  // checkpoint
  t.add(&Options::output_dir, "output_dir", G::checkpoint, kTrain,
        "Run folder: checkpoints, metrics.jsonl, TensorBoard events, summary.json, resolved config");
  t.add(&Options::overwrite_output_dir, "overwrite_output_dir", G::checkpoint, kTrain,
        "Allow training into an output_dir that holds another run's files (checkpoints, logs, "
        "summary); they are deleted at the start");
  t.add(&Options::save_steps, "save_steps", G::checkpoint, kTrain,
        "Save a checkpoint every this many optimizer steps; 0: only at the end")
      .range(0);
  t.add(&Options::save_total_limit, "save_total_limit", G::checkpoint, kTrain,
        "Keep only the newest this many checkpoints (the best by AR is kept apart); 0: keep all")
      .range(0);
  t.add(&Options::resume_from_checkpoint, "resume_from_checkpoint", G::checkpoint, kTrain,
        "Resume from a checkpoint folder, or auto: the newest complete one in output_dir; empty: "
        "start fresh");
  t.add(&Options::checkpoint, "checkpoint", G::checkpoint, kExport | kEval,
        "A checkpoint folder or an exported head folder to export or evaluate")
      .required(kExport | kEval);
  t.add(&Options::format, "format", G::checkpoint, kExport,
        "Export layout: sglang (also loaded by vLLM), speculators, vllm-eagle1");
  // runtime
  t.add(&Options::device, "device", G::runtime, kTrain | kInspect | kEval | kGenerate,
        "auto (cuda when available, else cpu), cpu, cuda or cuda:N")
      .check([](const std::string& d, const Options&) {
        if (d == "auto" || d == "cpu" || d == "cuda") return std::string();
        if (d.rfind("cuda:", 0) == 0 && d.size() > 5 &&
            d.find_first_not_of("0123456789", 5) == std::string::npos)
          return std::string();
        return std::string("auto, cpu, cuda or cuda:N");
      });
  t.add(&Options::num_threads, "num_threads", G::runtime, kAll,
        "CPU threads for tensor math; fixed so a resumed run computes the same; 0: the machine's "
        "cores")
      .range(0, 1024);
  t.add(&Options::config, "config", G::runtime, kAll,
        "A JSON config file (flat, keys = flag names); flags given on the command line override it")
      .not_in_config();
  return t.take();
}

}  // namespace

std::string_view command_name(Command c) {
  switch (c) {
    case Command::train: return "train";
    case Command::prepare: return "prepare";
    case Command::data_stats: return "data-stats";
    case Command::inspect: return "inspect";
    case Command::export_: return "export";
    case Command::eval: return "eval";
    case Command::generate: return "generate";
  }
  return "?";
}

const std::vector<Command>& all_commands() {
  static const std::vector<Command> v{Command::train,   Command::prepare, Command::data_stats, Command::inspect,
                                      Command::export_, Command::eval,    Command::generate};
  return v;
}

std::string_view group_name(Group g) {
  switch (g) {
    case Group::data: return "data";
    case Group::model: return "model";
    case Group::draft: return "draft";
    case Group::train: return "train";
    case Group::optim: return "optim";
    case Group::eval: return "eval";
    case Group::generate: return "generate";
    case Group::log: return "log";
    case Group::checkpoint: return "checkpoint";
    case Group::runtime: return "runtime";
  }
  return "?";
}

const std::vector<OptionEntry>& option_table() {
  static const std::vector<OptionEntry> table = declare_options();
  return table;
}

const OptionEntry* find_option(std::string_view name) {
  for (const auto& e : option_table())
    if (e.name == name) return &e;
  return nullptr;
}

std::string name_of(LrScheduler v) { return enum_name(v); }
std::string name_of(BadSamplePolicy v) { return enum_name(v); }
std::string name_of(OverlongPolicy v) { return enum_name(v); }
std::string name_of(NanPolicy v) { return enum_name(v); }
std::string name_of(TargetDtype v) { return enum_name(v); }
std::string name_of(ExportFormat v) { return enum_name(v); }

}  // namespace eagle::config
