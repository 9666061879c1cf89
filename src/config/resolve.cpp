// Resolving options from defaults, a JSON config file and flags; validation, dump and docs.
#include "eagle/util/fs_sync.h"
#include "eagle/config/resolve.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include "eagle/util/error.h"
#include "eagle/util/json_file.h"

namespace eagle::config {

using json = nlohmann::json;

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

namespace {

std::string did_you_mean(const std::string& key) {
  const OptionEntry* best = nullptr;
  std::size_t best_d = std::string::npos;
  for (const auto& e : option_table()) {
    std::size_t d = edit_distance(key, e.name);
    if (d < best_d) {
      best_d = d;
      best = &e;
    }
  }
  std::size_t allowed = std::max<std::size_t>(2, key.size() / 4);
  if (best && best_d <= allowed) return fmt::format(" (did you mean \"{}\"?)", best->name);
  return "";
}

}  // namespace

void add_flags(CLI::App& sub, BoundFlags& bound) {
  for (const auto& e : option_table()) {
    if (!(e.commands & mask(bound.command))) continue;
    CLI::Option* opt = e.add_flag(sub, bound.parsed);
    std::string group(group_name(e.group));
    group[0] = static_cast<char>(std::toupper(group[0]));
    opt->group(group + " options");
    if (e.in_config) opt->description(fmt::format("{} (default {})", e.help, e.default_text));
    bound.flags.emplace_back(&e, opt);
  }
}

void apply_json(Options& opts, const json& doc, const std::string& source) {
  if (!doc.is_object())
    throw Error(ErrorKind::usage, "a config file must hold one JSON object").file(source)
        .expected("{\"key\": value, ...}").found(std::string(doc.type_name()));
  std::vector<std::string> unknown;
  for (const auto& [key, value] : doc.items()) {
    const OptionEntry* e = find_option(key);
    if (!e || !e->in_config) unknown.push_back(key);
  }
  if (!unknown.empty()) {
    std::string list;
    for (const auto& k : unknown) list += fmt::format("{}\"{}\"{}", list.empty() ? "" : ", ", k, did_you_mean(k));
    throw Error(ErrorKind::usage, fmt::format("{} unknown key{}: {}", unknown.size(),
                                               unknown.size() == 1 ? "" : "s", list))
        .file(source).hint("eagle-train <command> --help lists every key");
  }
  for (const auto& [key, value] : doc.items()) find_option(key)->from_json(opts, value, source);
}

void apply_json_file(Options& opts, const std::string& path, std::set<std::string>* keys) {
  util::require_regular_file(path, ErrorKind::usage, "the config file");
  std::ifstream in(path);
  if (!in) throw Error(ErrorKind::usage, "cannot open the config file").file(path);
  json doc;
  try {
    doc = util::parse_json_unique_keys(in, ErrorKind::usage, "a key is given twice", path);
  } catch (const json::parse_error& e) {
    throw Error(ErrorKind::usage, "malformed JSON").file(path).place(fmt::format("byte {}", e.byte)).found(e.what());
  } catch (const json::exception& e) {  // a number past the double range (1e999): out_of_range, not parse_error
    throw Error(ErrorKind::usage, "malformed JSON").file(path).found(e.what());
  }
  apply_json(opts, doc, path);
  if (keys && doc.is_object())
    for (const auto& [key, value] : doc.items()) keys->insert(key);
}

Options resolve(const BoundFlags& bound, std::set<std::string>* from_config) {
  Options out;  // defaults
  std::set<std::string> file_keys;
  if (!bound.parsed.config.empty()) {
    apply_json_file(out, bound.parsed.config, &file_keys);
    out.config = bound.parsed.config;
  }
  for (const auto& [entry, flag] : bound.flags) {
    if (flag->count() == 0) continue;
    entry->copy(out, bound.parsed);
    file_keys.erase(entry->name);  // the flag's value wins
  }
  if (from_config) *from_config = std::move(file_keys);
  return out;
}

namespace {

// An option's value as the user gave it: its JSON, except a non-finite number (a flag's nan or
// inf, which JSON cannot hold and nlohmann writes as null) is named as what it is.
std::string value_text(const json& v) {
  if (v.is_number_float() && !std::isfinite(v.get<double>())) return fmt::format("{}", v.get<double>());
  if (!v.is_array()) return v.dump();
  std::string out;
  for (const auto& x : v) out += (out.empty() ? "" : ",") + value_text(x);
  return "[" + out + "]";
}

}  // namespace

void validate(const Options& opts, Command command, const std::set<std::string>& from_config) {
  std::vector<std::string> failures;
  for (const auto& e : option_table()) {
    if (!(e.commands & mask(command))) continue;
    std::string expected = e.check(opts);
    if (expected.empty()) continue;
    std::string where = from_config.count(e.name) ? fmt::format(" (from {})", opts.config) : "";
    failures.push_back(
        fmt::format("--{}: expected {}, found {}{}", e.name, expected, value_text(e.to_json(opts)), where));
  }
  if (failures.empty()) return;
  // One line, every failure on it.
  std::string msg = failures.size() == 1 ? "invalid option value: "
                                         : fmt::format("{} invalid option values: ", failures.size());
  for (std::size_t i = 0; i < failures.size(); ++i) msg += (i ? "; " : "") + failures[i];
  throw Error(ErrorKind::usage, msg);
}

void check_required(const Options& opts, Command command) {
  // What the command cannot run without, all missing ones in one error.
  std::vector<std::string> missing;
  for (const auto& e : option_table()) {
    for (const auto& r : e.required) {
      if (!(r.commands & mask(command)) || e.is_set(opts)) continue;
      bool stood_in = false;
      std::string alternatives;
      for (const auto& name : r.alternatives) {
        const OptionEntry* alt = find_option(name);
        stood_in = stood_in || (alt && alt->is_set(opts));
        alternatives += (alternatives.empty() ? " (or --" : " or --") + name;
      }
      if (stood_in) continue;
      missing.push_back("--" + e.name + alternatives + (alternatives.empty() ? "" : ")"));
    }
  }
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    throw Error(ErrorKind::usage, fmt::format("{} needs {}", command_name(command), list))
        .hint(fmt::format("eagle-train {} --help describes every option", command_name(command)));
  }
}

void check_ignored(const Options& opts, Command command) {
  const Options defaults;
  std::vector<std::string> ignored;
  for (const auto& e : option_table()) {
    if (!(e.commands & mask(command))) continue;
    for (const auto& a : e.acts_only) {
      if (!(a.commands & mask(command)) || a.holds(opts)) continue;
      const json value = e.to_json(opts);
      if (value == e.to_json(defaults)) continue;
      ignored.push_back(fmt::format("--{} {} acts only with {}", e.name, value_text(value), a.when));
    }
  }
  if (ignored.empty()) return;
  std::string list;
  for (const auto& i : ignored) list += (list.empty() ? "" : "; ") + i;
  const std::string what = ignored.size() == 1 ? std::string("an option") : fmt::format("{} options", ignored.size());
  throw Error(ErrorKind::usage, fmt::format("{} would be ignored: {}", what, list))
      .hint("drop it, or set what it acts with");
}

json to_json(const Options& opts, Command command) {
  json out = json::object();
  for (const auto& e : option_table())
    if ((e.commands & mask(command)) && e.in_config) out[e.name] = e.to_json(opts);
  return out;
}

std::string options_markdown() {
  std::string out =
      "# eagle-train options\n\n"
      "Generated from the option table (src/config/option_table.cpp) by "
      "`eagle-train --options-markdown`; a test fails when this file is stale.\n\n"
      "Every option is both a command-line flag (`--name value`) and a key of the flat JSON "
      "config file (`\"name\": value`). Precedence: defaults < `--config file.json` < flags. "
      "Unknown keys in a config file are an error. `eagle-train <command> --dump-config` prints "
      "the resolved JSON, which `--config` accepts back. Lists are given as `--name 1,2,3` or "
      "`--name 1 2 3`; booleans as `--name` or `--name=false`.\n";
  std::map<int, std::vector<const OptionEntry*>> by_group;
  for (const auto& e : option_table()) by_group[static_cast<int>(e.group)].push_back(&e);
  for (const auto& [g, entries] : by_group) {
    out += fmt::format("\n## {}\n\n| option | type | default | commands | meaning |\n|---|---|---|---|---|\n",
                       group_name(static_cast<Group>(g)));
    for (const OptionEntry* e : entries) {
      std::string cmds;
      for (Command c : all_commands())
        if (e->commands & mask(c)) cmds += (cmds.empty() ? "" : ", ") + std::string(command_name(c));
      std::string def = e->in_config ? "`" + e->default_text + "`" : "(not in config files)";
      std::string type = e->type;
      std::replace(type.begin(), type.end(), '|', '/');
      std::string meaning = e->help;
      for (const auto& a : e->acts_only) meaning += fmt::format(". Acts only with {}; otherwise refused", a.when);
      out += fmt::format("| `{}` | {} | {} | {} | {} |\n", e->name, type, def, cmds, meaning);
    }
  }
  return out;
}

}  // namespace eagle::config
