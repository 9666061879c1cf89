// Parses and validates one pretokenized sample object with simdjson's On-Demand API, then applies
// the overlong and bad-sample policies (see docs/data.md for the rules).
#include "sample_parser.h"

#include <simdjson.h>

#include <algorithm>
#include <cctype>
#include <vector>

#include "eagle/util/log.h"
#include "eagle/util/error.h"

namespace eagle::data {
namespace {

namespace od = simdjson::ondemand;
using config::BadSamplePolicy;
using config::OverlongPolicy;

constexpr std::int64_t kIgnoreLabel = -100;  // Hugging Face's ignore index
constexpr std::uint64_t kMaxTokenId = 0xFFFFFFFFull;
constexpr int kLoggedSkips = 5;

Error bad(std::string message, std::string place) {
  return Error(ErrorKind::input, std::move(message)).place(std::move(place));
}

// "malformed JSON (the JSON document has an improper structure: ...)": simdjson's reason, lower-cased.
Error malformed(simdjson::error_code code, std::string place) {
  std::string why = simdjson::error_message(code);
  if (why.size() > 1 && !std::isupper(static_cast<unsigned char>(why[1])))  // keep "JSON"
    why[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(why[0])));
  while (!why.empty() && why.back() == '.') why.pop_back();
  return bad("malformed JSON (" + why + ")", std::move(place));
}

std::string element(const char* field, std::size_t i) {
  return std::string("field ") + field + "[" + std::to_string(i) + "]";
}

std::string token_text(od::value& v) {
  std::string_view raw = v.raw_json_token();
  while (!raw.empty() && (raw.back() == ' ' || raw.back() == '\n' || raw.back() == '\r' || raw.back() == '\t'))
    raw.remove_suffix(1);
  if (raw.size() > 40) return std::string(raw.substr(0, 40)) + "...";
  return std::string(raw);
}

bool is_type_error(simdjson::error_code e) {
  return e == simdjson::INCORRECT_TYPE || e == simdjson::NUMBER_ERROR || e == simdjson::NUMBER_OUT_OF_RANGE;
}

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// The hot path: an array of integers parsed straight from the text (On-Demand's per-element calls
// cost more than the parsing). Appends through push (which may refuse a value); returns false on
// anything unusual, and the exact On-Demand path below then reads it again and names the problem.
// `end` bounds the document.
template <typename Push>
bool fast_int_array(const char* p, const char* end, Push&& push) {
  if (p >= end || *p != '[') return false;
  ++p;
  while (p < end && is_space(*p)) ++p;
  if (p < end && *p == ']') return true;
  for (;;) {
    while (p < end && is_space(*p)) ++p;
    bool negative = p < end && *p == '-';
    p += negative;
    const char* start = p;
    std::int64_t x = 0;
    while (p < end && static_cast<unsigned>(*p - '0') < 10u) x = x * 10 + (*p++ - '0');
    auto digits = p - start;
    if (digits == 0 || digits > 10 || (digits > 1 && *start == '0') || !push(negative ? -x : x)) return false;
    while (p < end && is_space(*p)) ++p;
    if (p >= end) return false;
    if (*p == ']') return true;
    if (*p != ',') return false;
    ++p;
  }
}

// Reads the integer array of field `name` into the one output given: token ids, 0/1 mask values, or
// raw labels. Errors name the field and element.
// Token ids above max_id are refused (the target's vocabulary when known, else the uint32 range).
void read_int_array(od::value& field_value, const char* name, std::vector<std::int64_t>* out_wide,
                    std::vector<TokenId>* out_ids, std::vector<std::uint8_t>* out_mask, const char* doc_end,
                    std::uint64_t max_id = kMaxTokenId) {
  const char* text = field_value.raw_json_token().data();
  if (out_ids) {
    std::size_t n0 = out_ids->size();
    if (fast_int_array(text, doc_end, [&](std::int64_t x) {
          out_ids->push_back(static_cast<TokenId>(x));
          return x >= 0 && static_cast<std::uint64_t>(x) <= max_id;
        }))
      return;
    out_ids->resize(n0);
  } else if (out_mask) {
    std::size_t n0 = out_mask->size();
    if (fast_int_array(text, doc_end, [&](std::int64_t x) {
          out_mask->push_back(static_cast<std::uint8_t>(x));
          return x == 0 || x == 1;
        }))
      return;
    out_mask->resize(n0);
  } else {
    std::size_t n0 = out_wide->size();
    if (fast_int_array(text, doc_end, [&](std::int64_t x) {
          out_wide->push_back(x);
          return true;
        }))
      return;
    out_wide->resize(n0);
  }
  od::array arr;
  if (auto e = field_value.get_array().get(arr)) {
    if (!is_type_error(e)) throw malformed(e, std::string("field ") + name);
    throw bad(std::string("field ") + name + " is not an array", std::string("field ") + name)
                        .expected("an array of integers")
                        .found(token_text(field_value));
  }
  std::size_t i = 0;
  for (auto item : arr) {
    od::value v;
    if (auto e = item.get(v)) throw malformed(e, element(name, i));
    std::int64_t x = 0;
    if (auto e = v.get_int64().get(x)) {
      std::string text = token_text(v);
      // A JSON value starts with one of these; anything else (a stray '}' or ',') is broken JSON.
      bool value_start =
          !text.empty() && std::string_view("\"-0123456789tfn[{").find(text[0]) != std::string_view::npos;
      if (!is_type_error(e) || !value_start) throw malformed(e, element(name, i)).found("'" + text + "'");
      const char* what = out_ids ? "token id is not an integer" : "entry is not an integer";
      throw bad(what, element(name, i)).expected("an integer").found(text);
    }
    if (out_ids) {
      if (x < 0 || static_cast<std::uint64_t>(x) > kMaxTokenId)
        throw bad(x < 0 ? "token id is negative" : "token id is too large", element(name, i))
            .expected("an id in [0, 4294967295]")
            .found(std::to_string(x));
      if (static_cast<std::uint64_t>(x) > max_id)
        throw bad("token id outside the target's vocabulary", element(name, i))
            .expected("ids < " + std::to_string(max_id + 1))
            .found(std::to_string(x))
            .hint("the data was tokenized for another model");
      out_ids->push_back(static_cast<TokenId>(x));
    } else if (out_mask) {
      if (x != 0 && x != 1)
        throw bad("loss_mask value is not 0 or 1", element(name, i)).expected("0 or 1").found(std::to_string(x));
      out_mask->push_back(static_cast<std::uint8_t>(x));
    } else {
      out_wide->push_back(x);
    }
    ++i;
  }
}

}  // namespace

// simdjson 3.0 has no document::at_end(): past the last token current_location() fails.
bool at_end(od::document& doc) {
  const char* at = nullptr;
  return doc.current_location().get(at) != simdjson::SUCCESS;
}

struct SampleParser::Impl {
  Impl(const ReadOptions& o, FlatBuilder& b, ReadCounts& c) : opts(o), out(&b), counts(&c) {}
  ReadOptions opts;
  FlatBuilder* out;
  ReadCounts* counts;
  od::parser parser;
  std::vector<TokenId> ids;
  std::vector<std::uint8_t> mask;
  std::vector<std::int64_t> labels;
  std::string category;           // the sample's `category` ("": none)
  const char* doc_end = nullptr;  // end of the document being parsed

  // The optional `category` field: a string (a label such as SPEED-Bench's "coding") or null.
  void read_category(od::value& v) {
    bool null = false;
    if (auto e = v.is_null().get(null)) throw malformed(e, "field category");
    if (null) return;
    std::string_view text;
    if (auto e = v.get_string().get(text)) {
      if (!is_type_error(e)) throw malformed(e, "field category");
      throw bad("field category is not a string", "field category").expected("a string, e.g. \"coding\"")
          .found(token_text(v));
    }
    if (text.size() > kMaxCategoryBytes)
      throw bad("field category is too long", "field category")
          .expected("at most " + std::to_string(kMaxCategoryBytes) + " bytes")
          .found(std::to_string(text.size()) + " bytes");
    category.assign(text);
  }

  // Validates the object and fills ids/mask; throws Error with the place relative to the sample.
  void read_object(od::object& obj) {
    ids.clear();
    mask.clear();
    labels.clear();
    category.clear();
    bool has_ids = false, has_mask = false, has_labels = false, has_category = false;
    for (auto f : obj) {
      od::field field;
      if (auto e = std::move(f).get(field)) throw malformed(e, "a field name");
      std::string_view key;
      if (auto e = field.unescaped_key().get(key)) throw malformed(e, "a field name");
      bool* seen = key == "input_ids"   ? &has_ids
                   : key == "loss_mask" ? &has_mask
                   : key == "labels"    ? &has_labels
                   : key == "category"  ? &has_category
                                        : nullptr;
      if (!seen) continue;  // other fields (id, conversations, ...) are ignored
      if (*seen) throw bad("field given twice", "field " + std::string(key));
      *seen = true;
      if (key == "category")
        read_category(field.value());
      else if (key == "input_ids")
        read_int_array(field.value(), "input_ids", nullptr, &ids, nullptr, doc_end,
                       opts.vocab_size > 0 ? static_cast<std::uint64_t>(opts.vocab_size) - 1 : kMaxTokenId);
      else if (key == "loss_mask")
        read_int_array(field.value(), "loss_mask", nullptr, nullptr, &mask, doc_end);
      else
        read_int_array(field.value(), "labels", &labels, nullptr, nullptr, doc_end);
    }
    if (!has_ids)
      throw bad("field input_ids is missing", "field input_ids")
                          .expected("an array of token ids")
                          .found("no such field");
    if (has_mask && has_labels)
      throw bad("both labels and loss_mask are given", "fields labels, loss_mask")
                          .hint("give one: loss_mask (0/1 per token) or labels (-100 for masked tokens)");
    if (ids.empty()) throw bad("empty sample", "field input_ids").expected("at least one token").found("[]");
    for (const auto& m : opts.media_tokens)  // a multimodal target's placeholders: the data must be text only
      if (auto at = std::find(ids.begin(), ids.end(), m.id); at != ids.end())
        throw media_token_error(m, element("input_ids", static_cast<std::size_t>(at - ids.begin())));
    if (has_mask && mask.size() != ids.size())
      throw bad("loss_mask length differs from input_ids", "field loss_mask")
                          .expected(std::to_string(ids.size()) + " entries")
                          .found(std::to_string(mask.size()));
    if (has_labels) {
      if (labels.size() != ids.size())
        throw bad("labels length differs from input_ids", "field labels")
                            .expected(std::to_string(ids.size()) + " entries")
                            .found(std::to_string(labels.size()));
      mask.resize(ids.size());
      for (std::size_t i = 0; i < ids.size(); ++i) {
        if (labels[i] == kIgnoreLabel) {
          mask[i] = 0;
        } else if (labels[i] == static_cast<std::int64_t>(ids[i])) {
          mask[i] = 1;
        } else {
          throw bad("labels differ from input_ids", element("labels", i))
                  .expected("input_ids[" + std::to_string(i) + "] = " + std::to_string(ids[i]) + " or -100")
                  .found(std::to_string(labels[i]))
                  .hint("labels must be unshifted (labels[i] = input_ids[i]); shifted labels are not accepted");
        }
      }
    }
    if (!has_mask && !has_labels) mask.assign(ids.size(), 1);
    if (!opts.allow_untrained && std::find(mask.begin(), mask.end(), 1) == mask.end())
      throw bad("sample has no trained token (every loss_mask entry is 0)",
                has_labels ? "field labels" : "field loss_mask");
  }

  // Applies the overlong policy to the validated sample and appends it.
  void keep() {
    std::size_t n = ids.size();
    auto limit = static_cast<std::size_t>(opts.training_seq_len);
    if (n > limit) {
      if (opts.overlong_policy == OverlongPolicy::drop) {
        ++counts->dropped;
        return;
      }
      n = limit;
      if (std::find(mask.begin(), mask.begin() + static_cast<std::ptrdiff_t>(n), 1) ==
          mask.begin() + static_cast<std::ptrdiff_t>(n)) {
        ++counts->dropped;  // every trained token lay beyond the cut
        return;
      }
      ++counts->truncated;
    }
    out->add(ids.data(), mask.data(), n, category);
    ++counts->kept;
  }

  void skip_or_throw(Error& e) {
    if (opts.bad_sample_policy == BadSamplePolicy::error) throw e;
    if (counts->skipped < kLoggedSkips) log::warn("data", "skipping a bad sample: {}", e.format());
    ++counts->skipped;
  }
};

SampleParser::SampleParser(const ReadOptions& opts, FlatBuilder& out, ReadCounts& counts)
    : impl_(std::make_unique<Impl>(opts, out, counts)) {}
SampleParser::~SampleParser() = default;

void SampleParser::parse_line(const std::string& file, std::uint64_t line, const char* data, std::size_t len) {
  Impl& m = *impl_;
  ++m.counts->records;
  m.doc_end = data + len;
  try {
    od::document doc;
    if (auto e = m.parser.iterate(data, len, len + simdjson::SIMDJSON_PADDING).get(doc)) throw malformed(e, "");
    od::object obj;
    if (auto e = doc.get_object().get(obj)) {
      if (!is_type_error(e)) throw malformed(e, "");
      throw bad("a line is not a JSON object", "").expected("{\"input_ids\": [...], ...}");
    }
    m.read_object(obj);
    if (!at_end(doc)) throw bad("malformed JSON", "").found("content after the object");
  } catch (Error& e) {
    e.file(file);
    e.place(e.place().empty() ? "line " + std::to_string(line) : "line " + std::to_string(line) + ", " + e.place());
    m.skip_or_throw(e);
    return;
  }
  m.keep();
}

void SampleParser::parse_array(const std::string& file, const char* data, std::size_t len,
                               const std::function<void(std::uint64_t)>& on_sample) {
  Impl& m = *impl_;
  m.doc_end = data + len;
  od::document doc;
  std::size_t index = 0;
  auto line_of = [&]() {
    const char* at = nullptr;
    if (doc.current_location().get(at)) return std::string();
    return " (line " + std::to_string(1 + std::count(data, at, '\n')) + ")";
  };
  auto fail = [&](Error& e, bool recoverable) {
    e.file(file);
    std::string where = "array index " + std::to_string(index) + line_of();
    e.place(e.place().empty() ? where : where + ", " + e.place());
    if (recoverable) {
      m.skip_or_throw(e);
    } else {
      throw e;
    }
  };
  if (auto e = m.parser.iterate(data, len, len + simdjson::SIMDJSON_PADDING).get(doc))
    throw malformed(e, "").file(file);  // no document to name a place in
  od::array arr;
  if (auto e = doc.get_array().get(arr)) {
    Error err = bad("the file is not a JSON array of samples", "").expected("[{\"input_ids\": [...]}, ...]");
    if (!is_type_error(e)) err = malformed(e, "");
    throw std::move(err.file(file));
  }
  for (auto item : arr) {
    ++m.counts->records;
    try {
      od::object obj;
      if (auto e = item.get_object().get(obj)) {
        if (!is_type_error(e)) throw malformed(e, "");
        throw bad("an array element is not a JSON object", "").expected("{\"input_ids\": [...], ...}");
      }
      m.read_object(obj);
    } catch (Error& e) {
      // Only errors found after the whole element was read leave the parser where it can go on.
      fail(e, e.message().rfind("malformed JSON", 0) != 0);
      ++index;
      continue;
    }
    m.keep();
    ++index;
    const char* at = nullptr;
    if (on_sample && !doc.current_location().get(at)) on_sample(static_cast<std::uint64_t>(at - data));
  }
  if (!at_end(doc)) {
    Error err = bad("malformed JSON", "").found("content after the array");
    throw std::move(err.file(file));
  }
}

}  // namespace eagle::data
