// The option table itself: unique names, types and ranges, JSON precedence and round trip, docs.
#include <CLI/CLI.hpp>
#include <catch2/catch.hpp>

#include <cmath>
#include <set>

#include "eagle/config/resolve.h"
#include "eagle/util/error.h"
#include "helpers.h"

using namespace eagle;
using namespace eagle::config;
using nlohmann::json;

namespace {

// Parses "train ARGS" through a real CLI11 app bound like the executable's.
Options parse_train(std::vector<std::string> args) {
  CLI::App app;
  CLI::App* sub = app.add_subcommand("train");
  BoundFlags bound{Command::train, {}, {}};
  add_flags(*sub, bound);
  args.insert(args.begin(), "train");
  std::reverse(args.begin(), args.end());
  app.parse(args);
  Options o = resolve(bound);
  validate(o, Command::train);
  return o;
}

std::string error_text(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.format();
  }
  return "<no error>";
}

}  // namespace

TEST_CASE("option table has unique snake_case names and every seeded option", "[config]") {
  std::set<std::string> names;
  for (const auto& e : option_table()) {
    INFO(e.name);
    CHECK(names.insert(e.name).second);
    CHECK(e.name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") == std::string::npos);
    CHECK_FALSE(e.help.empty());
    CHECK(e.commands != 0);
  }
  for (const char* seeded :
       {"model_name_or_path", "data_path", "eval_data_path", "output_dir", "overwrite_output_dir",
        "training_seq_len", "bucket_granularity", "bucket_boundaries", "group_by_length", "padding_free",
        "max_tokens_per_batch", "per_device_train_batch_size", "gradient_accumulation_steps", "max_steps",
        "num_train_epochs", "learning_rate", "lr_scheduler_type", "warmup_steps", "weight_decay",
        "adam_beta1", "adam_beta2", "max_grad_norm", "bf16", "eagle_version", "ttt_steps", "ttt_loss_decay",
        "draft_vocab_size", "aux_hidden_state_layer_ids", "bad_sample_policy", "overlong_policy",
        "logging_steps", "eval_steps", "eval_num_prompts", "eval_max_new_tokens", "eval_draft_len",
        "save_steps", "save_total_limit", "resume_from_checkpoint", "nan_policy", "device", "num_threads",
        "seed", "log_level", "config"}) {
    INFO(seeded);
    CHECK(find_option(seeded) != nullptr);
  }
}

TEST_CASE("flags set typed values and defaults stay otherwise", "[config]") {
  Options o = parse_train({"--bucket_granularity", "512", "--bf16", "--lr_scheduler_type", "linear",
                           "--bucket_boundaries", "256,512,1024", "--learning_rate", "3e-4"});
  CHECK(o.bucket_granularity == 512);
  CHECK(o.bf16);
  CHECK(o.lr_scheduler_type == LrScheduler::linear);
  CHECK(o.bucket_boundaries == std::vector<std::int64_t>{256, 512, 1024});
  CHECK(o.learning_rate == Approx(3e-4));
  CHECK(o.training_seq_len == Options{}.training_seq_len);
  Options last = parse_train({"--seed", "1", "--seed", "7", "--nan_policy", "skip", "--nan_policy", "error"});
  CHECK(last.seed == 7);  // a repeated flag: the last one wins (a script can override its own defaults)
  CHECK(last.nan_policy == NanPolicy::error);
  Options off = parse_train({"--bf16=false", "--group_by_length=false"});
  CHECK_FALSE(off.bf16);
  CHECK_FALSE(off.group_by_length);
}

TEST_CASE("bad values are rejected naming the flag", "[config]") {
  std::string msg = error_text([] { parse_train({"--bucket_granularity", "-3"}); });
  CHECK_THAT(msg, Catch::Contains("--bucket_granularity") && Catch::Contains("an integer in [0, 1048576]") &&
                      Catch::Contains("found -3"));
  msg = error_text([] { parse_train({"--bucket_boundaries", "512,256"}); });
  CHECK_THAT(msg, Catch::Contains("--bucket_boundaries") && Catch::Contains("strictly increasing"));
  msg = error_text([] { parse_train({"--eagle_version", "2", "--adam_beta2", "1.5"}); });
  CHECK_THAT(msg, Catch::Contains("2 invalid option values") && Catch::Contains("--eagle_version") &&
                      Catch::Contains("--adam_beta2"));
  CHECK_THROWS_AS(parse_train({"--lr_scheduler_type", "cosin"}), CLI::ValidationError);
  CHECK_THROWS_AS(parse_train({"--max_steps", "ten"}), CLI::ParseError);
}

TEST_CASE("a NaN or infinite value is refused naming it, not as null (issue 41 item 16)", "[config]") {
  for (const char* v : {"nan", "inf", "-inf"}) {
    INFO(v);
    const std::string msg = error_text([&] { parse_train({"--learning_rate", v}); });
    CHECK_THAT(msg, Catch::Contains("--learning_rate") && Catch::Contains(std::string("found ") + v) &&
                        !Catch::Contains("null"));
  }
}

TEST_CASE("target_server needs an absolute target_server_storage for train and eval, not for generate (issue 41 item 1)",
          "[config]") {
  std::string msg = error_text([] { parse_train({"--target_server", "http://127.0.0.1:8000"}); });
  CHECK_THAT(msg, Catch::Contains("--target_server_storage") && Catch::Contains("shared_storage_path"));
  msg = error_text(
      [] { parse_train({"--target_server", "http://127.0.0.1:8000", "--target_server_storage", "storage/hs"}); });
  CHECK_THAT(msg, Catch::Contains("--target_server_storage") && Catch::Contains("an absolute path") &&
                      Catch::Contains("storage/hs"));
  CHECK_NOTHROW(parse_train({"--target_server", "http://127.0.0.1:8000", "--target_server_storage", "/tmp/hs"}));
  Options o;
  o.target_server = "http://127.0.0.1:8000";
  CHECK_NOTHROW(validate(o, Command::generate));  // generate's servers write no files
}

TEST_CASE("every numeric option has a finite range, so an absurd value fails at start-up", "[config]") {
  for (const auto& e : option_table()) {
    INFO(e.name << " (" << e.type << ")");
    const bool numeric = e.type == "int" || e.type == "float" || e.type == "list of int";
    if (!numeric) continue;
    CHECK(e.has_range);
    CHECK(std::isfinite(e.range_lo));
    CHECK(std::isfinite(e.range_hi));
    CHECK(e.range_lo <= e.range_hi);
    // The default itself is in range (a check that refused the default would refuse every run).
    CHECK(e.check(Options{}).empty());
  }
}

TEST_CASE("out-of-range values that failed only at the final evaluation are refused at start-up", "[config]") {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--eval_max_new_tokens", "1000000000000"},
                                             {"--per_device_train_batch_size", "4000000000"},
                                             {"--gradient_accumulation_steps", "4000000000"},
                                             {"--max_tokens_per_batch", "1000000000000"},
                                             {"--learning_rate", "1e308"},
                                             {"--learning_rate", "nan"},
                                             {"--adam_beta1", "1"},
                                             {"--adam_beta2", "1"},
                                             {"--ddp_timeout_s", "10000000000"},
                                             {"--max_steps", "1000000000000000"},
                                             {"--num_train_epochs", "inf"},
                                             {"--warmup_steps", "1000000000000000"},
                                             {"--eagle_version", "1000000000000"}}) {
    INFO(args[0] << " " << args[1]);
    std::string msg = error_text([&] { parse_train(args); });
    CHECK_THAT(msg, Catch::Contains(args[0]) && Catch::Contains("found"));
  }
  CHECK_THAT(error_text([] { parse_train({"--adam_beta2", "1"}); }), Catch::Contains("a number in [0, 1)"));
  CHECK_NOTHROW(parse_train({"--adam_beta2", "0.999", "--learning_rate", "1", "--ddp_timeout_s", "604800"}));
}

TEST_CASE("required options are declared in the table and all missing ones are named at once", "[config]") {
  Options o;
  std::string msg = error_text([&] { check_required(o, Command::train); });
  CHECK(msg == "train needs --data_path (or --features_path), --model_name_or_path (or --features_path) (hint: "
               "eagle-train train --help describes every option)");
  msg = error_text([&] { check_required(o, Command::eval); });
  CHECK(msg == "eval needs --data_path (or --eval_data_path or --features_path), --model_name_or_path (or "
               "--features_path), --checkpoint (hint: eagle-train eval --help describes every option)");
  Options offline;
  offline.features_path = "features";
  CHECK_NOTHROW(check_required(offline, Command::train));  // stored features stand in for data and target
  CHECK_THAT(error_text([] { check_required(Options{}, Command::dump_features); }),
             Catch::Contains("dump-features needs --data_path, --output, --model_name_or_path"));
  o.eval_data_path = "held.jsonl";
  o.model_name_or_path = "m";
  o.checkpoint = "c";
  CHECK_NOTHROW(check_required(o, Command::eval));  // the alternative stands in for data_path
  CHECK_THAT(error_text([&] { check_required(o, Command::export_); }), Catch::Contains("export needs --output"));
  CHECK(error_text([] { check_required(Options{}, Command::data_stats); }).rfind("data-stats needs --data_path", 0) ==
        0);
}

TEST_CASE("unknown JSON keys are all listed with did-you-mean", "[config]") {
  Options o;
  json doc = {{"bucket_granulrity", 64}, {"lerning_rate", 1e-3}, {"zzz_totally_unknown", 1}, {"seed", 3}};
  std::string msg = error_text([&] { apply_json(o, doc, "cfg.json"); });
  CHECK_THAT(msg, Catch::StartsWith("cfg.json: 3 unknown keys"));
  CHECK_THAT(msg, Catch::Contains("\"bucket_granulrity\" (did you mean \"bucket_granularity\"?)"));
  CHECK_THAT(msg, Catch::Contains("\"lerning_rate\" (did you mean \"learning_rate\"?)"));
  CHECK_THAT(msg, Catch::Contains("\"zzz_totally_unknown\""));
  CHECK(o.seed == Options{}.seed);  // nothing applied from a rejected file
}

TEST_CASE("wrong JSON types name the file and key", "[config]") {
  Options o;
  std::string msg = error_text([&] { apply_json(o, json{{"max_steps", "ten"}}, "c.json"); });
  CHECK(msg == "c.json: key \"max_steps\": wrong type: expected an integer, found \"ten\"");
  msg = error_text([&] { apply_json(o, json{{"bucket_boundaries", {1, "x"}}}, "c.json"); });
  CHECK_THAT(msg, Catch::Contains("key \"bucket_boundaries[1]\""));
  msg = error_text([&] { apply_json(o, json{{"nan_policy", "ignore"}}, "c.json"); });
  CHECK_THAT(msg, Catch::Contains("one of error|skip"));
  msg = error_text([&] { apply_json(o, json{{"config", "other.json"}}, "c.json"); });
  CHECK_THAT(msg, Catch::Contains("unknown key"));
}

TEST_CASE("precedence: flag beats file beats default", "[config]") {
  test::TempDir dir;
  auto cfg = dir / "c.json";
  test::write_file(cfg, R"({"bucket_granularity": 256, "learning_rate": 0.001, "ttt_steps": 3})");
  Options o = parse_train({"--config", cfg.string(), "--bucket_granularity", "64"});
  CHECK(o.bucket_granularity == 64);     // flag
  CHECK(o.learning_rate == Approx(1e-3));  // file
  CHECK(o.ttt_steps == 3);               // file
  CHECK(o.seed == 42);                   // default
}

TEST_CASE("dump-config round trips through --config unchanged", "[config]") {
  test::TempDir dir;
  Options o = parse_train({"--bucket_granularity", "512", "--bucket_boundaries", "100,200", "--nan_policy",
                           "skip", "--learning_rate", "0.00017", "--bf16"});
  json dumped = to_json(o, Command::train);
  CHECK(dumped["bucket_granularity"] == 512);
  CHECK_FALSE(dumped.contains("config"));
  CHECK_FALSE(dumped.contains("input"));  // a prepare-only option
  auto cfg = dir / "dump.json";
  test::write_file(cfg, dumped.dump(2));
  Options back = parse_train({"--config", cfg.string()});
  CHECK(to_json(back, Command::train) == dumped);
}

TEST_CASE("edit distance", "[config]") {
  CHECK(edit_distance("kitten", "sitting") == 3);
  CHECK(edit_distance("", "abc") == 3);
  CHECK(edit_distance("seed", "seed") == 0);
}

TEST_CASE("docs/options.md is generated from the table and current", "[config]") {
  std::string committed = test::read_file(std::string(EAGLE_SOURCE_DIR) + "/docs/options.md");
  INFO("regenerate with: build/eagle-train --options-markdown > docs/options.md");
  CHECK(committed == options_markdown());
}

TEST_CASE("an option that would be silently ignored is refused by name (issue 41 item 10)", "[config]") {
  // Every acts_only() of the table: set away from its default where its condition does not hold.
  Options o;
  o.eval_top_p = 0.5;
  o.eval_draft_sampling = DraftSampling::sample;
  o.eval_tree_steps = 3;
  o.target_server_retries = 1;
  o.target_server_inflight = 2;
  o.target_server_timeout_s = 5;
  o.mask_token_id = 3;
  std::string msg = error_text([&] { check_ignored(o, Command::train); });
  CHECK(msg.rfind("7 options would be ignored: ", 0) == 0);
  for (const char* part : {"--eval_top_p 0.5 acts only with --eval_temperature > 0",
                           "--eval_draft_sampling \"sample\" acts only with --eval_temperature > 0",
                           "--eval_tree_steps 3 acts only with --eval_tree_topk > 0",
                           "--target_server_retries 1 acts only with --target_server",
                           "--mask_token_id 3 acts only with --parallel_drafting"})
    CHECK_THAT(msg, Catch::Contains(part));
  // Each condition, once it holds, lets its options act.
  o.eval_temperature = 1.0;
  o.eval_tree_topk = 2;
  o.target_server = "http://localhost:8000";
  o.parallel_drafting = true;
  CHECK_NOTHROW(check_ignored(o, Command::train));

  Options e;
  e.quantize_scale = QuantScale::mse;
  e.quantize_fc = true;
  CHECK_THAT(error_text([&] { check_ignored(e, Command::export_); }),
             Catch::Contains("2 options would be ignored") && Catch::Contains("--quantize_scale \"mse\" acts only with --quantize fp8"));
  e.quantize = Quantize::fp8;
  CHECK_NOTHROW(check_ignored(e, Command::export_));
  CHECK_NOTHROW(check_ignored(e, Command::eval));  // not an export: the export options are not eval's

  Options g;
  g.top_p = 0.9;
  CHECK_THAT(error_text([&] { check_ignored(g, Command::generate); }), Catch::Contains("--top_p 0.9 acts only with --temperature > 0"));
  g.temperature = 0.7;
  CHECK_NOTHROW(check_ignored(g, Command::generate));
  // The defaults (what --dump-config writes for them) act with nothing and pass everywhere.
  for (Command c : all_commands()) CHECK_NOTHROW(check_ignored(Options{}, c));
}

TEST_CASE("EAGLE-3's variants with eagle_version 1 are refused by name, not trained as EAGLE-1 (issue 53 L3)",
          "[config]") {
  for (const std::vector<std::string>& variant : std::vector<std::vector<std::string>>{{"--fc_norm"},
                                                                                       {"--norm_output"},
                                                                                       {"--norm_before_fc"},
                                                                                       {"--parallel_drafting"},
                                                                                       {"--draft_layer", "qwen3"},
                                                                                       {"--draft_layer", "deepseek"}}) {
    INFO(variant.front());
    auto args = variant;
    args.insert(args.end(), {"--eagle_version", "1"});
    CHECK_THAT(error_text([&] { parse_train(args); }),
               Catch::Contains("--eagle_version") && Catch::Contains("EAGLE-1's head has none of them"));
    args.back() = "3";
    CHECK_NOTHROW(parse_train(args));
  }
}
