// The RoPE fields of a target's config.json (see config_reader.h): transformers 5.x rope_parameters
// (flat, or per layer type as Gemma 3 writes it) and 4.x rope_theta + rope_scaling (+ Gemma 3's
// rope_local_base_freq), partial rotary dimensions, and every scaling type's parameters.
#include <cmath>
#include <functional>

#include "config_reader.h"

namespace eagle::target {

namespace {

constexpr const char* kRopeTypes = "default, linear, dynamic, llama3, yarn or longrope";

std::vector<double> factor_list(const Reader& p, const std::string& key, std::size_t size,
                                const std::function<Error(const std::string&, const std::string&)>& bad) {
  EAGLE_CHECK(p.has(key) && p.j[key].is_array(), bad(key, "longrope needs a list of factors"));
  std::vector<double> v;
  for (const auto& x : p.j[key]) {
    EAGLE_CHECK(x.is_number() && x.get<double>() > 0 && std::isfinite(x.get<double>()),
                bad(key, "factors must be positive numbers").found(x.dump()));
    v.push_back(x.get<double>());
  }
  EAGLE_CHECK(v.size() == size, bad(key, "one factor per rotary frequency")
                                    .expected(fmt::format("{} factors (rotary dimensions / 2)", size))
                                    .found(std::to_string(v.size())));
  return v;
}

}  // namespace

model::RopeConfig parse_rope(const Reader& r, const json& params, const std::string& where, const TargetConfig& c) {
  model::RopeConfig rope;
  rope.max_position_embeddings = c.max_position_embeddings;
  const Reader p{r.path, params};
  auto bad = [&](const std::string& key, const std::string& what) {
    return Error(ErrorKind::input, what).file(r.path).place(fmt::format("field \"{}.{}\"", where, key));
  };
  // Every number within model/config_limits.h's RoPE bounds, as the head's reader reads them back;
  // a bad() of the object's spelling names the field.
  namespace lim = model::limits;
  auto in = [&](const std::string& key, double def, double lo, double hi) {
    const double v = p.number_or(key, def);
    EAGLE_CHECK(v >= lo && v <= hi, bad(key, "out of range")
                                        .expected(fmt::format("a number in [{}, {}]", lo, hi))
                                        .found(p.has(key) ? params[key].dump() : fmt::format("{}", v)));
    return v;
  };
  rope.theta = in("rope_theta", 10000.0, lim::kMinRope, lim::kMaxRope);
  rope.type = p.has("rope_type") ? p.string_or("rope_type", "default") : p.string_or("type", "default");
  // Phi-3's old spellings of longrope (Phi3Config does the same).
  if (c.family == Family::phi3 && (rope.type == "su" || rope.type == "yarn")) rope.type = "longrope";
  EAGLE_CHECK(rope.type == "default" || rope.type == "linear" || rope.type == "dynamic" || rope.type == "llama3" ||
                  rope.type == "yarn" || rope.type == "longrope",
              bad("rope_type", "unsupported RoPE type")
                  .expected(kRopeTypes)
                  .found(rope.type)
                  .hint("this scaling changes the attention math and is not implemented"));
  // Partial rotary: the first head_dim * factor features turn (inside the object in 5.x, top level in 4.x;
  // GLM-4.5's default is 0.5, Glm4MoeConfig's; Qwen3.5's and Qwen3-Next's 0.25, their configs').
  const bool quarter = c.family == Family::qwen3_next || c.family == Family::qwen3_5 || c.family == Family::qwen3_5_moe;
  const double partial_default = c.family == Family::glm4_moe ? 0.5 : (quarter ? 0.25 : 1.0);
  const double partial = p.number_or("partial_rotary_factor", r.number_or("partial_rotary_factor", partial_default));
  const auto rotary = static_cast<std::int64_t>(static_cast<double>(c.head_dim) * partial);
  EAGLE_CHECK(partial > 0 && partial <= 1 && rotary >= 2 && rotary % 2 == 0,
              bad("partial_rotary_factor", "out of range")
                  .expected("in (0, 1], rotating an even number of features")
                  .found(fmt::format("{} (x head_dim {} = {})", partial, c.head_dim, rotary)));
  rope.head_dim = rotary;
  // transformers gives the top-level original_max_position_embeddings priority (Phi-3 keeps it there).
  auto original = [&]() {
    const auto v = r.has("original_max_position_embeddings") ? r.integer("original_max_position_embeddings")
                                                             : p.integer("original_max_position_embeddings");
    EAGLE_CHECK(v > 0 && v <= lim::kMaxPositions,
                bad("original_max_position_embeddings", "out of range")
                    .expected(fmt::format("an integer in [1, {}]", lim::kMaxPositions))
                    .found(std::to_string(v)));
    return v;
  };
  if (rope.type == "yarn" || rope.type == "longrope") {
    rope.original_max_position_embeddings = original();
    // transformers: a missing factor is the ratio of the two context lengths.
    rope.factor =
        in("factor",
           static_cast<double>(c.max_position_embeddings) / static_cast<double>(rope.original_max_position_embeddings),
           lim::kMinRope, lim::kMaxRope);
    // The attention factor scales cos and sin, so every score by its square: released YaRN models use about
    // 1-1.5 (0.1 ln(factor) + 1); past 100 the scores overflow in half precision and the run ends in NaN.
    rope.attention_factor = in("attention_factor", 0.0, 0.0, 100.0);
  }
  if (rope.type == "yarn") {
    rope.beta_fast = in("beta_fast", 32.0, lim::kMinRope, lim::kMaxRope);
    rope.beta_slow = in("beta_slow", 1.0, lim::kMinRope, lim::kMaxRope);
    // The ramp runs from the dimension of beta_fast rotations to that of beta_slow: fast above slow.
    EAGLE_CHECK(rope.beta_fast > rope.beta_slow,
                bad("beta_fast", "out of range")
                    .expected(fmt::format("more than beta_slow {} (YaRN's ramp from fast to slow rotations)",
                                          rope.beta_slow))
                    .found(fmt::format("{}", rope.beta_fast)));
    rope.truncate = p.boolean_or("truncate", true);
    rope.mscale = in("mscale", 0.0, -lim::kMaxRope, lim::kMaxRope);
    rope.mscale_all_dim = in("mscale_all_dim", 0.0, -lim::kMaxRope, lim::kMaxRope);
  }
  if (rope.type == "longrope") {
    const auto n = static_cast<std::size_t>(rotary / 2);
    rope.short_factor = factor_list(p, "short_factor", n, bad);
    rope.long_factor = factor_list(p, "long_factor", n, bad);
    // transformers compares the factor with 1 (attention factor 1 below it) instead of requiring >= 1
    // (bounded above, with the attention factor).
    return rope;
  }
  if (rope.type == "linear" || rope.type == "dynamic" || rope.type == "llama3")
    rope.factor = p.number_or("factor", 0.0);
  if (rope.type == "llama3") {
    rope.low_freq_factor = in("low_freq_factor", 1.0, lim::kMinRope, lim::kMaxRope);
    rope.high_freq_factor = in("high_freq_factor", 4.0, lim::kMinRope, lim::kMaxRope);
    rope.original_max_position_embeddings = p.integer("original_max_position_embeddings");
    EAGLE_CHECK(
        rope.original_max_position_embeddings > 0 && rope.original_max_position_embeddings <= lim::kMaxPositions,
        bad("original_max_position_embeddings", "out of range")
            .expected(fmt::format("an integer in [1, {}]", lim::kMaxPositions))
            .found(std::to_string(rope.original_max_position_embeddings)));
    EAGLE_CHECK(rope.high_freq_factor > rope.low_freq_factor,
                bad("high_freq_factor", "must exceed low_freq_factor")
                    .expected(fmt::format("more than {} (low_freq_factor)", rope.low_freq_factor))
                    .found(fmt::format("{}", rope.high_freq_factor)));
  }
  // dynamic: transformers scales against max_position_embeddings (original_max_position_embeddings
  // is not used by its formula), so rope.original_max_position_embeddings stays 0.
  EAGLE_CHECK(rope.factor >= 1.0 && rope.factor <= lim::kMaxRope,
              bad("factor", "RoPE scaling factor out of range")
                  .expected(fmt::format("a number in [1, {}]", lim::kMaxRope))
                  .found(fmt::format("{}", rope.factor)));
  return rope;
}

void read_rope_layers(const Reader& r, TargetConfig& c) {
  if (c.family == Family::gemma4_text) return;  // read_gemma4: each layer type's RoPE over its own head width
  const bool gemma3 = c.family == Family::gemma3_text;
  if (r.has("rope_parameters")) {
    const auto& rp = r.j["rope_parameters"];
    EAGLE_CHECK(rp.is_object(), r.bad("rope_parameters", "not an object").found(rp.dump()));
    if (!rp.contains("full_attention") && !rp.contains("sliding_attention")) {
      c.rope = parse_rope(r, rp, "rope_parameters", c);
      return;
    }
    // Per layer type (transformers 5 for Gemma 3; any family may write it).
    for (auto it = rp.begin(); it != rp.end(); ++it)
      EAGLE_CHECK(it.key() == "full_attention" || it.key() == "sliding_attention",
                  r.bad("rope_parameters." + it.key(), "unknown layer type in per-layer-type RoPE")
                      .expected("full_attention or sliding_attention"));
    const json full = rp.contains("full_attention") && rp["full_attention"].is_object()
                          ? rp["full_attention"]
                          : json{{"rope_theta", gemma3 ? 1e6 : 10000.0}};
    c.rope = parse_rope(r, full, "rope_parameters.full_attention", c);
    if (rp.contains("sliding_attention") && rp["sliding_attention"].is_object())
      c.attention.local_rope = parse_rope(r, rp["sliding_attention"], "rope_parameters.sliding_attention", c);
    return;
  }
  json params = json::object();
  if (r.has("rope_scaling")) {
    params = r.j["rope_scaling"];
    EAGLE_CHECK(params.is_object(), r.bad("rope_scaling", "not an object").found(params.dump()));
  }
  params["rope_theta"] = r.number_or("rope_theta", gemma3 ? 1e6 : 10000.0);
  c.rope = parse_rope(r, params, "rope_scaling", c);
  if (gemma3)  // 4.x: the local layers' base; their RoPE is never scaled
    c.attention.local_rope =
        parse_rope(r, json{{"rope_type", "default"}, {"rope_theta", r.number_or("rope_local_base_freq", 1e4)}},
                   "rope_local_base_freq", c);
}

}  // namespace eagle::target
