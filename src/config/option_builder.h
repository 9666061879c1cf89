// Private to src/config/option_table.cpp: the machinery that turns one declaration into a flag, a
// JSON key, a range check and a docs row: enum names, codecs (JSON <-> field, CLI11 binding, type
// name) and the typed builder (Table, Entry) that declare_options uses.
#pragma once

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <array>
#include <charconv>
#include <cstdint>
#include <deque>
#include <limits>
#include <optional>

#include "eagle/config/option_table.h"
#include "eagle/util/error.h"

namespace eagle::config::detail {

// Whether a range's upper bound is allowed (adam_beta2 may come close to 1 but never reach it).
enum class Upper { inclusive, exclusive };

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
struct EnumNames<Draft> {
  static constexpr std::array<std::pair<const char*, Draft>, 5> v{{{"eagle", Draft::eagle},
                                                                   {"mtp", Draft::mtp},
                                                                   {"dflash", Draft::dflash},
                                                                   {"dspark", Draft::dspark},
                                                                   {"dflash2", Draft::dflash2}}};
};
template <>
struct EnumNames<ExportFormat> {
  static constexpr std::array<std::pair<const char*, ExportFormat>, 6> v{{{"sglang", ExportFormat::sglang},
                                                                          {"speculators", ExportFormat::speculators},
                                                                          {"vllm-eagle1", ExportFormat::vllm_eagle1},
                                                                          {"mtp", ExportFormat::mtp},
                                                                          {"dflash", ExportFormat::dflash},
                                                                          {"dspark", ExportFormat::dspark}}};
};

template <>
struct EnumNames<Quantize> {
  static constexpr std::array<std::pair<const char*, Quantize>, 2> v{{{"none", Quantize::none}, {"fp8", Quantize::fp8}}};
};
template <>
struct EnumNames<QuantScale> {
  static constexpr std::array<std::pair<const char*, QuantScale>, 2> v{
      {{"amax", QuantScale::amax}, {"mse", QuantScale::mse}}};
};
template <>
struct EnumNames<DdpBackend> {
  static constexpr std::array<std::pair<const char*, DdpBackend>, 3> v{
      {{"auto", DdpBackend::auto_}, {"gloo", DdpBackend::gloo}, {"nccl", DdpBackend::nccl}}};
};
template <>
struct EnumNames<DraftSampling> {
  static constexpr std::array<std::pair<const char*, DraftSampling>, 2> v{
      {{"greedy", DraftSampling::greedy}, {"sample", DraftSampling::sample}}};
};
template <>
struct EnumNames<BestMetric> {
  static constexpr std::array<std::pair<const char*, BestMetric>, 5> v{{{"ar", BestMetric::ar},
                                                                        {"tree_ar", BestMetric::tree_ar},
                                                                        {"temp_ar", BestMetric::temp_ar},
                                                                        {"alpha_ar", BestMetric::alpha_ar},
                                                                        {"loss", BestMetric::loss}}};
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
// What an error adds for a value that names something known but not built (none now).
template <typename E>
std::string enum_unknown_note(std::string_view) {
  return "";
}
template <typename E>
std::string enum_name(E e) {
  for (const auto& [name, value] : EnumNames<E>::v)
    if (value == e) return name;
  return "?";
}

// ----- codecs: JSON <-> field, CLI11 binding, type name for docs -----
inline Error type_error(const std::string& source, const std::string& key, const std::string& expected,
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

// Flags are parsed strictly: the whole text must be the number, and a value out of the type's
// range is an error (never clamped).
template <typename T>
T parse_number(const std::string& flag, const std::string& text) {
  T v{};
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec == std::errc::result_out_of_range)
    throw CLI::ValidationError(flag, fmt::format("{} is out of range for {}", text,
                                                 std::is_integral_v<T> ? "a 64-bit integer" : "a double"));
  if (ec != std::errc() || ptr != end || text.empty())
    throw CLI::ValidationError(
        flag, fmt::format("expected {}, found \"{}\"", std::is_integral_v<T> ? "an integer" : "a number", text));
  return v;
}

template <>
struct Codec<std::int64_t> {
  static std::string type() { return "int"; }
  static json to(std::int64_t v) { return v; }
  static std::int64_t from(const json& j, const std::string& src, const std::string& key) {
    if (!j.is_number_integer()) throw type_error(src, key, "an integer", j);
    if (j.is_number_unsigned() && j.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
      throw type_error(src, key, "an integer that fits 64 bits", j);
    return j.get<std::int64_t>();
  }
  static CLI::Option* bind(CLI::App& app, const std::string& flag, std::int64_t& v) {
    return app.add_option_function<std::string>(flag, [&v, flag](const std::string& s) {
      v = parse_number<std::int64_t>(flag, s);
    })->type_name("INT")->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
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
    return app.add_option_function<std::string>(flag, [&v, flag](const std::string& s) {
      v = parse_number<double>(flag, s);
    })->type_name("FLOAT")->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
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
    if constexpr (std::is_same_v<T, std::int64_t>) {
      return app.add_option_function<std::vector<std::string>>(flag, [&v, flag](const std::vector<std::string>& items) {
        v.clear();
        for (const auto& item : items) v.push_back(parse_number<std::int64_t>(flag, item));
      })->type_name("INT,...")->delimiter(',');
    } else {
      return app.add_option(flag, v)->delimiter(',');
    }
  }
};

template <typename E>
struct Codec<E, std::enable_if_t<std::is_enum_v<E>>> {
  static std::string type() { return enum_choices<E>(); }
  static json to(E v) { return enum_name(v); }
  static E from(const json& j, const std::string& src, const std::string& key) {
    if (!j.is_string()) throw type_error(src, key, "one of " + enum_choices<E>(), j);
    auto v = enum_parse<E>(j.get<std::string>());
    if (!v) throw type_error(src, key, "one of " + enum_choices<E>() + enum_unknown_note<E>(j.get<std::string>()), j);
    return *v;
  }
  static CLI::Option* bind(CLI::App& app, const std::string& flag, E& v) {
    return app.add_option_function<std::string>(flag, [&v, flag](const std::string& s) {
      auto parsed = enum_parse<E>(s);
      if (!parsed)
        throw CLI::ValidationError(
            flag, "expected one of " + enum_choices<E>() + ", found \"" + s + "\"" + enum_unknown_note<E>(s));
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
// follow runs train's rounds: it takes every option train takes, with the same checks (not its requirements: its
// data is the rollout folder's).
constexpr CommandMask with_follow(CommandMask commands) {
  return commands & mask(Command::train) ? commands | mask(Command::follow) : commands;
}

template <typename T>
class Entry {
 public:
  Entry(OptionEntry& e, T Options::*field) : e_(e), field_(field) {}

  // Numeric range, inclusive (or below `hi` when hi_open); applies to each element of a list. Every
  // numeric option has a finite one, so that an absurd value fails at start-up, not hours later
  // (test_config_option_table.cpp checks the table).
  Entry& range(double lo, double hi, Upper upper = Upper::inclusive) {
    const bool open = upper == Upper::exclusive;
    std::string what = describe_range(lo, hi, open);
    e_.range_lo = lo;
    e_.range_hi = hi;
    e_.range_hi_open = open;
    e_.has_range = true;
    e_.check = [field = field_, lo, hi, open, what](const Options& o) {
      return in_range(o.*field, lo, hi, open) ? std::string() : what;
    };
    return *this;
  }
  // A custom check of the value (the other options given for context): "" or what is expected. It
  // runs after a range declared before it.
  Entry& check(std::function<std::string(const T&, const Options&)> f) {
    e_.check = [field = field_, f = std::move(f), before = e_.check](const Options& o) {
      std::string what = before(o);
      return what.empty() ? f(o.*field, o) : what;
    };
    return *this;
  }
  // The subcommands that cannot run without it (or without one of `alternatives`).
  Entry& required(CommandMask commands, std::vector<std::string> alternatives = {}) {
    e_.required.push_back({commands, std::move(alternatives)});
    return *this;
  }
  // The option acts only where holds(options) is true (`when` says what, for the message).
  Entry& acts_only(CommandMask commands, std::string when, std::function<bool(const Options&)> holds) {
    e_.acts_only.push_back({with_follow(commands), std::move(when), std::move(holds)});
    return *this;
  }
  Entry& not_in_config() {
    e_.in_config = false;
    return *this;
  }

 private:
  static std::string describe_range(double lo, double hi, bool open) {
    constexpr bool is_int = std::is_same_v<T, std::int64_t> || std::is_same_v<T, std::vector<std::int64_t>>;
    std::string kind = is_int ? "an integer" : "a number";
    if constexpr (!std::is_arithmetic_v<T>) kind = "a list of " + std::string(is_int ? "integers" : "numbers");
    auto num = [](double x) { return fmt::format("{}", x); };
    return fmt::format("{} in [{}, {}{}", kind, num(lo), num(hi), open ? ")" : "]");
  }
  template <typename V>
  static bool in_range(const V& v, double lo, double hi, bool open) {
    if constexpr (std::is_arithmetic_v<V>) {
      const double x = static_cast<double>(v);
      return x >= lo && (open ? x < hi : x <= hi);  // NaN fails both
    } else {
      for (const auto& x : v)
        if (!in_range(x, lo, hi, open)) return false;
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
    e.commands = with_follow(commands);
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

// The commands an option is for, and upper bounds shared by the table's files.
inline constexpr CommandMask kTrain = mask(Command::train);
inline constexpr CommandMask kFollow = mask(Command::follow);
inline constexpr CommandMask kPrepare = mask(Command::prepare);
inline constexpr CommandMask kStats = mask(Command::data_stats);
inline constexpr CommandMask kInspect = mask(Command::inspect);
inline constexpr CommandMask kExport = mask(Command::export_);
inline constexpr CommandMask kEval = mask(Command::eval);
inline constexpr CommandMask kGenerate = mask(Command::generate);
inline constexpr CommandMask kDump = mask(Command::dump_features);
inline constexpr CommandMask kReport = mask(Command::report);
// Every command that reads data, models or runs (report only reads a run folder: its few options name it).
inline constexpr CommandMask kAll = kTrain | kPrepare | kStats | kInspect | kExport | kEval | kGenerate | kDump;

// Upper bounds: far above any real run, low enough that nothing derived from them (KV caches, batch
// tensors, step counts, chrono durations) overflows or tries to allocate the impossible.
inline constexpr double kMaxTokens = 1 << 20;          // tokens per sample (training_seq_len, buckets)
inline constexpr double kMaxBatchTokens = 1 << 24;     // tokens per micro-batch
inline constexpr double kMaxRows = 1 << 16;            // rows per micro-batch, micro-batches per step
inline constexpr double kMaxSteps = 1e9;               // optimizer steps
inline constexpr double kMaxVocab = 1 << 24;           // tokens of a vocabulary
inline constexpr double kMaxLayers = 1 << 12;          // target layer ids
inline constexpr double kMaxNewTokens = 1 << 16;       // tokens generated per prompt or reply
inline constexpr double kMaxSeed = 9007199254740992.0; // 2^53: every seed is exact as a double and in JSON
inline constexpr double kMaxTimeoutS = 7 * 24 * 3600;  // a week, in seconds

// The eval group of the table (option_table_eval.cpp).
void declare_eval_options(Table& t);

// Every option, in the order --help lists them (option_table.cpp); option_table() holds them once.
std::vector<OptionEntry> declare_options();

}  // namespace eagle::config::detail
