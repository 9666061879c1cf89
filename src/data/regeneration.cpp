// A sample regenerated turn by turn (see regeneration.h).
#include "eagle/data/regeneration.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "eagle/util/error.h"

namespace eagle::data {

std::vector<Turn> split_turns(const Sample& s) {
  std::vector<Turn> turns;
  const auto n = static_cast<std::int64_t>(s.input_ids.size());
  std::int64_t p = 0;
  while (p < n) {
    Turn t;
    t.prompt_begin = p;
    while (p < n && !s.loss_mask[p]) ++p;
    if (p == n) break;  // the tail
    t.reply_begin = p;
    while (p < n && s.loss_mask[p]) ++p;
    t.reply_end = p;
    turns.push_back(t);
  }
  return turns;
}

Regeneration::Regeneration(Sample source, const GenerationLimits& limits)
    : source_(std::move(source)), limits_(limits), turns_(split_turns(source_)) {
  // Without a trained token there is no reply to write; without a prompt the target has nothing to
  // answer (a sample trained from its first token on).
  if (turns_.empty() || turns_[0].reply_begin == 0) {
    finish(Outcome::copied);
    return;
  }
  start_turn(0);
}

std::span<const TokenId> Regeneration::pending() const {
  return std::span<const TokenId>(out_.input_ids).subspan(static_cast<std::size_t>(cached_));
}

void Regeneration::append(std::int64_t begin, std::int64_t end, std::uint8_t mask) {
  const auto room = limits_.context - static_cast<std::int64_t>(out_.input_ids.size());
  if (end - begin > room) {
    truncated_ = true;
    end = begin + std::max<std::int64_t>(room, 0);
  }
  for (auto p = begin; p < end; ++p) {
    out_.input_ids.push_back(source_.input_ids[p]);
    out_.loss_mask.push_back(mask);
  }
}

void Regeneration::start_turn(std::size_t t) {
  turn_ = t;
  const Turn& turn = turns_[t];
  // The prompt and at least one generated token must fit the context.
  const auto needed = static_cast<std::int64_t>(out_.input_ids.size()) + (turn.reply_begin - turn.prompt_begin) + 1;
  if (needed > limits_.context) {
    truncated_ = true;
    // truncate keeps the turns before this one; a sample without any reply is dropped either way.
    finish(limits_.overlong == config::OverlongPolicy::truncate && t > 0 ? Outcome::regenerated : Outcome::dropped);
    return;
  }
  append(turn.prompt_begin, turn.reply_begin, 0);
  reply_tokens_ = 0;
}

void Regeneration::accept(TokenId token) {
  out_.input_ids.push_back(token);
  out_.loss_mask.push_back(1);
  ++reply_tokens_;
  ++generated_;
  const bool end = std::find(limits_.end_ids.begin(), limits_.end_ids.end(), token) != limits_.end_ids.end();
  if (end || reply_tokens_ >= limits_.max_new_tokens ||
      static_cast<std::int64_t>(out_.input_ids.size()) >= limits_.context)
    end_reply(end);
}

void Regeneration::end_reply(bool by_end) {
  const Turn& turn = turns_[turn_];
  if (by_end) {
    ++by_end_;
    // Template tokens the source trains after its reply's end id (e.g. "\n" after <|im_end|>).
    auto p = turn.reply_end;
    while (p > turn.reply_begin &&
           std::find(limits_.end_ids.begin(), limits_.end_ids.end(), source_.input_ids[p - 1]) == limits_.end_ids.end())
      --p;
    if (p > turn.reply_begin) append(p, turn.reply_end, 1);
  } else {
    ++by_length_;
  }
  if (turn_ + 1 < turns_.size()) {
    start_turn(turn_ + 1);
    return;
  }
  append(turn.reply_end, static_cast<std::int64_t>(source_.input_ids.size()), 0);  // the tail
  finish(Outcome::regenerated);
}

void RegenerationCounts::add(const Regeneration& r) {
  ++samples;
  regenerated += r.outcome() == Outcome::regenerated;
  copied += r.outcome() == Outcome::copied;
  dropped += r.outcome() == Outcome::dropped;
  truncated += r.truncated() && r.outcome() == Outcome::regenerated;
  generated_tokens += static_cast<std::uint64_t>(r.generated());
  stopped_by_end += static_cast<std::uint64_t>(r.stopped_by_end());
  stopped_by_length += static_cast<std::uint64_t>(r.stopped_by_length());
}

namespace {

// The fields of RegenerationCounts (const or not) by JSON key.
template <typename Counts, typename F>
void for_each_count(Counts& c, F&& f) {
  f("samples", c.samples);
  f("regenerated", c.regenerated);
  f("copied", c.copied);
  f("dropped", c.dropped);
  f("truncated", c.truncated);
  f("generated_tokens", c.generated_tokens);
  f("stopped_by_end", c.stopped_by_end);
  f("stopped_by_length", c.stopped_by_length);
}

}  // namespace

nlohmann::json RegenerationCounts::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for_each_count(*this, [&](const char* key, const std::uint64_t& v) { j[key] = v; });
  return j;
}

RegenerationCounts RegenerationCounts::from_json(const nlohmann::json& j, const std::string& file) {
  RegenerationCounts c;
  if (j.is_null()) return c;
  for_each_count(c, [&](const char* key, std::uint64_t& v) {
    EAGLE_CHECK(
        j.is_object() && j.contains(key) && j[key].is_number_unsigned(),
        Error(ErrorKind::input, "malformed counts").file(file).place(std::string("counts.") + key).expected("a count"));
    v = j[key].get<std::uint64_t>();
  });
  return c;
}

}  // namespace eagle::data
