// The feature store of dump-features folders (see store.h): the manifest, the shards (checked and
// range-checked when opened, their values finite when read), the target's identity.
#include "eagle/features/store.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "eagle/model/dtype.h"
#include "eagle/model/safetensors.h"
#include "eagle/model/shape_check.h"
#include "eagle/util/error.h"
#include "eagle/util/json_file.h"

namespace eagle::features {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

torch::ScalarType dtype_from_name(const std::string& s, const std::string& file) {
  if (const auto t = model::dtype_of_name(s)) return *t;
  throw Error(ErrorKind::input, "unknown feature dtype")
      .file(file)
      .place("layout.dtype")
      .found(s)
      .expected("bfloat16, float16 or float32");
}

// The manifest's layout.last_hidden: where the stored last hidden state was taken.
constexpr const char* kLastBeforeNorm = "before the final norm";
constexpr const char* kLastAfterNorm = "after the final norm";

std::string l_text(const FeatureLayout& l) {
  return fmt::format("hidden_size {}, aux_width {}, target_argmax {}", l.hidden_size, l.aux_width, l.has_argmax);
}

Error shard_error(const std::string& file, const std::string& place) {
  return Error(ErrorKind::input, "a feature shard does not match its manifest")
      .file(file)
      .place(place)
      .hint("the folder was changed after the dump; dump the features again");
}

// The dump's aux layers: none for EAGLE-1 (aux_width 0), else EAGLE-3's exactly 3 input-of-layer
// ids, low -> high, inside the target, filling aux_width. A manifest with other ids would train a head
// of another shape, or one EAGLE-3 servers do not load (the dump's own option allows 3 only).
void check_aux_ids(const FeatureManifest& m, const std::string& path) {
  const auto& ids = m.aux_layer_ids;
  const json& t = m.target;
  const std::int64_t layers = t.is_object() && t.contains("num_hidden_layers") && t["num_hidden_layers"].is_number()
                                  ? t["num_hidden_layers"].get<std::int64_t>()
                                  : std::numeric_limits<std::int64_t>::max();
  const bool eagle1 = m.layout.aux_width == 0;
  bool ok = eagle1 ? ids.empty() : ids.size() == 3 && m.layout.aux_width == 3 * m.layout.hidden_size;
  for (std::size_t i = 0; i < ids.size(); ++i)
    ok = ok && ids[i] >= 0 && ids[i] <= layers && (i == 0 || ids[i] >= ids[i - 1]);
  EAGLE_CHECK(ok, Error(ErrorKind::input, "the manifest's aux layers are not an EAGLE-3 dump's three")
                      .file(path)
                      .place("aux_layer_ids")
                      .expected(eagle1 ? std::string("none (an EAGLE-1 dump: aux_width 0)")
                                       : fmt::format("3 input-of-layer ids in [0, {}], low -> high, and aux_width "
                                                     "3 x hidden_size = {}",
                                                     layers, 3 * m.layout.hidden_size))
                      .found(fmt::format("[{}], aux_width {}", fmt::join(ids, ", "), m.layout.aux_width))
                      .hint("the manifest was edited or is corrupt; dump the features again"));
}

// Checks a shard file against its manifest entry and layout; returns its sample offsets (a tensor:
// a copy when the file's offsets are not 8-byte aligned, so the caller keeps it).
torch::Tensor check_shard(const model::SafetensorsFile& f, const ShardInfo& s, const FeatureLayout& l) {
  const auto& meta = f.metadata();
  auto meta_is = [&](const char* key, const std::string& v) {
    auto it = meta.find(key);
    return it != meta.end() && it->second == v;
  };
  EAGLE_CHECK(meta_is("format", kFeaturesFormat) && meta_is("split", s.split) &&
                  meta_is("index", std::to_string(s.index)) && meta_is("first_sample", std::to_string(s.first_sample)),
              shard_error(f.path(), "__metadata__")
                  .expected(fmt::format("{} shard {} of split {} from sample {}", kFeaturesFormat, s.index, s.split,
                                        s.first_sample)));
  auto expect = [&](const char* name, std::vector<std::int64_t> shape, torch::ScalarType dtype) {
    const bool present = f.contains(name);
    EAGLE_CHECK(present && f.shape(name) == shape && f.dtype(name) == dtype,
                shard_error(f.path(), fmt::format("tensor \"{}\"", name))
                    .expected(model::tensor_text(dtype, shape))
                    .found(present ? model::tensor_text(f.dtype(name), f.shape(name)) : "missing"));
  };
  if (l.aux_width > 0) expect("aux_hidden", {s.tokens, l.aux_width}, l.dtype);
  expect("last_hidden", {s.tokens, l.hidden_size}, l.dtype);
  expect("target_argmax", {s.tokens}, torch::kInt32);
  expect("sample_offsets", {s.samples + 1}, torch::kInt64);
  auto offsets = f.get("sample_offsets");
  const auto* off = offsets.data_ptr<std::int64_t>();
  EAGLE_CHECK(off[0] == 0 && off[s.samples] == s.tokens, shard_error(f.path(), "sample_offsets"));
  for (std::int64_t j = 0; j < s.samples; ++j)
    EAGLE_CHECK(off[j + 1] >= off[j], shard_error(f.path(), fmt::format("sample_offsets[{}]", j + 1)));
  return offsets;
}

// The place of token t of a shard: its sample (of the split) and position there.
std::string token_place(const ShardInfo& s, const std::int64_t* off, std::int64_t t) {
  const auto j = std::upper_bound(off, off + s.samples + 1, t) - off - 1;
  return fmt::format("sample {} of split {}, position {}", s.first_sample + j, s.split, t - off[j]);
}

// Every stored argmax is a token of the target's vocabulary: past it the teacher's gather reads
// outside the LM head (an internal error), and -1 trained against no token at all, silently.
void check_argmax(const model::SafetensorsFile& f, const ShardInfo& s, const std::int64_t* off,
                  const std::int32_t* argmax, std::int64_t vocab_size) {
  for (std::int64_t t = 0; t < s.tokens; ++t)
    EAGLE_CHECK(argmax[t] >= 0 && argmax[t] < vocab_size,
                Error(ErrorKind::input, "a stored target_argmax is outside the target's vocabulary")
                    .file(f.path())
                    .place(fmt::format("tensor \"target_argmax\"[{}] ({})", t, token_place(s, off, t)))
                    .expected(fmt::format("a token id in [0, {})", vocab_size))
                    .found(std::to_string(argmax[t]))
                    .hint("the shard is corrupt or of another target; dump the features again"));
}

// A dump-features folder: its shards, mapped.
class DumpedStore : public FeatureStore {
 public:
  DumpedStore(const std::string& dir, const FeatureManifest& m, const data::Dataset& train,
              const data::Dataset* validation, std::int64_t vocab_size)
      : train_samples_(static_cast<std::int64_t>(train.size())) {
    layout_ = m.layout;
    source_ = dir;
    for (const auto& s : m.shards) {
      const data::Dataset* ds = s.split == "train" ? &train : s.split == "validation" ? validation : nullptr;
      EAGLE_CHECK(ds != nullptr && s.first_sample + s.samples <= static_cast<std::int64_t>(ds->size()),
                  Error(ErrorKind::input, "a shard names samples its split does not have")
                      .file((fs::path(dir) / kFeaturesManifest).string())
                      .place(s.file));
      Shard sh{s, model::SafetensorsFile::open((fs::path(dir) / s.file).string()), {}, {}, {}, {}};
      sh.offsets = check_shard(sh.file, s, layout_);
      const auto* off = sh.offsets.data_ptr<std::int64_t>();
      for (std::int64_t j = 0; j < s.samples; ++j)
        EAGLE_CHECK(off[j + 1] - off[j] == ds->length(static_cast<std::size_t>(s.first_sample + j)),
                    shard_error(sh.file.path(), fmt::format("sample {} of split {}", s.first_sample + j, s.split))
                        .expected(fmt::format("{} tokens (the dataset's)",
                                              ds->length(static_cast<std::size_t>(s.first_sample + j)))));
      if (layout_.aux_width > 0) sh.aux = sh.file.get("aux_hidden");
      sh.last = sh.file.get("last_hidden");
      sh.argmax = sh.file.get("target_argmax");
      check_argmax(sh.file, s, off, sh.argmax.data_ptr<std::int32_t>(), vocab_size);
      (s.split == "train" ? train_shards_ : validation_shards_).push_back(std::move(sh));
    }
    check_covered(train_shards_, train, "train", dir);
    if (validation) check_covered(validation_shards_, *validation, "validation", dir);
  }

  void read(std::int64_t sample, std::int64_t pos, std::int64_t n, const std::int32_t*, void* aux, void* last,
            std::int64_t* argmax) const override {
    const bool train = sample < train_samples_;
    const auto& shards = train ? train_shards_ : validation_shards_;
    const std::int64_t local = train ? sample : sample - train_samples_;
    auto it = std::upper_bound(shards.begin(), shards.end(), local,
                               [](std::int64_t v, const Shard& s) { return v < s.info.first_sample; });
    EAGLE_CHECK(it != shards.begin(), Error(ErrorKind::internal, "no shard holds the sample"));
    const Shard& s = *std::prev(it);
    const std::int64_t j = local - s.info.first_sample;
    const auto* off = s.offsets.data_ptr<std::int64_t>();
    EAGLE_CHECK(j < s.info.samples && pos >= 0 && pos + n <= off[j + 1] - off[j],
                Error(ErrorKind::internal, "feature read outside its sample")
                    .file(s.file.path())
                    .place(fmt::format("sample {}, positions {}..{}", sample, pos, pos + n)));
    const std::int64_t t0 = off[j] + pos;
    if (layout_.aux_width > 0 && aux) copy_rows(s, s.aux, "aux_hidden", layout_.aux_width, t0, n, aux);
    copy_rows(s, s.last, "last_hidden", layout_.hidden_size, t0, n, last);
    const auto* stored = s.argmax.data_ptr<std::int32_t>();
    for (std::int64_t k = 0; k < n; ++k) argmax[k] = stored[t0 + k];
  }

 private:
  struct Shard {
    ShardInfo info;
    model::SafetensorsFile file;
    torch::Tensor offsets, aux, last, argmax;  // views of the mapping (or aligned copies)
  };

  // Copies n rows of `width` values from token t0 of a shard's tensor, refusing NaN or Inf by file,
  // tensor and place (it would otherwise end the run as a non-finite loss, naming nothing).
  void copy_rows(const Shard& s, const torch::Tensor& t, const char* name, std::int64_t width, std::int64_t t0,
                 std::int64_t n, void* dst) const {
    const auto elem = static_cast<std::int64_t>(c10::elementSize(layout_.dtype));
    const auto* src = static_cast<const std::uint8_t*>(t.data_ptr()) + t0 * width * elem;
    const auto bad = first_non_finite(src, n * width, layout_.dtype);
    EAGLE_CHECK(bad < 0,
                Error(ErrorKind::input, "the stored features hold NaN or Inf")
                    .file(s.file.path())
                    .place(fmt::format("tensor \"{}\", {}", name,
                                       token_place(s.info, s.offsets.data_ptr<std::int64_t>(), t0 + bad / width)))
                    .expected("finite values")
                    .hint("the target overflowed in the dump's dtype or the shard is corrupt; check the "
                          "target (eagle-train inspect) and dump the features again"));
    std::memcpy(dst, src, static_cast<std::size_t>(n * width * elem));
  }
  static void check_covered(const std::vector<Shard>& shards, const data::Dataset& ds, const char* split,
                            const std::string& dir) {
    std::int64_t next = 0;
    for (const auto& s : shards) {
      EAGLE_CHECK(s.info.first_sample == next, Error(ErrorKind::input, "the shards of a split leave a gap")
                                                   .file((fs::path(dir) / kFeaturesManifest).string())
                                                   .place(fmt::format("split {}, sample {}", split, next)));
      next += s.info.samples;
    }
    EAGLE_CHECK(next == static_cast<std::int64_t>(ds.size()),
                Error(ErrorKind::input, "the shards do not cover the split")
                    .file(dir)
                    .place(fmt::format("split {}", split))
                    .expected(fmt::format("{} samples", ds.size()))
                    .found(std::to_string(next))
                    .hint("an unfinished dump: run the same dump-features command again to complete it"));
  }
  std::int64_t train_samples_;
  std::vector<Shard> train_shards_, validation_shards_;
};

}  // namespace

namespace {

// The first of count values whose exponent bits are all ones (NaN or Inf), -1 when none; in blocks
// without an early exit, so the compiler vectorises the common all-finite case.
template <typename Bits>
std::int64_t first_all_ones(const void* data, std::int64_t count, Bits exponent) {
  const auto* p = static_cast<const unsigned char*>(data);
  constexpr std::int64_t kBlock = 1024;
  for (std::int64_t b = 0; b < count; b += kBlock) {
    const std::int64_t end = std::min(count, b + kBlock);
    bool any = false;
    for (std::int64_t i = b; i < end; ++i) {
      Bits v;
      std::memcpy(&v, p + i * static_cast<std::int64_t>(sizeof(Bits)), sizeof(Bits));
      any |= (v & exponent) == exponent;
    }
    if (!any) continue;
    for (std::int64_t i = b; i < end; ++i) {
      Bits v;
      std::memcpy(&v, p + i * static_cast<std::int64_t>(sizeof(Bits)), sizeof(Bits));
      if ((v & exponent) == exponent) return i;
    }
  }
  return -1;
}

}  // namespace

std::int64_t first_non_finite(const void* data, std::int64_t count, torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kBFloat16:
      return first_all_ones<std::uint16_t>(data, count, 0x7f80);
    case torch::kHalf:
      return first_all_ones<std::uint16_t>(data, count, 0x7c00);
    case torch::kFloat:
      return first_all_ones<std::uint32_t>(data, count, 0x7f800000u);
    case torch::kDouble:
      return first_all_ones<std::uint64_t>(data, count, 0x7ff0000000000000ull);
    default:
      throw Error(ErrorKind::internal, "no finite check for this dtype").found(c10::toString(dtype));
  }
}

std::uint64_t FeatureManifest::bytes_per_token() const {
  return static_cast<std::uint64_t>((layout.aux_width + layout.hidden_size) * c10::elementSize(layout.dtype)) + 4;
}

bool is_features_folder(const std::string& dir) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir) / kFeaturesManifest, ec);
}

json to_json(const FeatureManifest& m) {
  json shards = json::array();
  for (const auto& s : m.shards)
    shards.push_back({{"split", s.split},
                      {"index", s.index},
                      {"first_sample", s.first_sample},
                      {"samples", s.samples},
                      {"tokens", s.tokens},
                      {"file", s.file}});
  return json{{"format", kFeaturesFormat},
              {"version", kFeaturesVersion},
              {"complete", m.complete},
              {"layout",
               {{"aux_width", m.layout.aux_width},
                {"hidden_size", m.layout.hidden_size},
                {"dtype", model::dtype_name(m.layout.dtype)},
                {"last_hidden", m.layout.pre_norm ? kLastBeforeNorm : kLastAfterNorm},
                {"target_argmax", m.layout.has_argmax},
                {"bytes_per_token", m.bytes_per_token()}}},
              {"aux_layer_ids", m.aux_layer_ids},
              {"target", m.target},
              {"options", m.options},
              {"shards", shards}};
}

FeatureManifest read_manifest(const std::string& dir) {
  const auto path = (fs::path(dir) / kFeaturesManifest).string();
  const json j = util::read_json_object(path, "features manifest");
  EAGLE_CHECK(j.value("format", "") == kFeaturesFormat,
              Error(ErrorKind::input, "not a features manifest").file(path).place("format").expected(kFeaturesFormat));
  EAGLE_CHECK(j.value("version", 0) == kFeaturesVersion,
              Error(ErrorKind::input, "unsupported features version")
                  .file(path)
                  .place("version")
                  .expected(std::to_string(kFeaturesVersion))
                  .found(j.contains("version") ? j["version"].dump() : "none")
                  .hint("dump the features again with this eagle-train"));
  FeatureManifest m;
  try {
    const auto& l = j.at("layout");
    m.layout.aux_width = l.at("aux_width").get<std::int64_t>();
    m.layout.hidden_size = l.at("hidden_size").get<std::int64_t>();
    m.layout.dtype = dtype_from_name(l.at("dtype").get<std::string>(), path);
    // dump-features --features_pre_norm stores the last hidden state before the final norm; the teacher and
    // an MTP head read it by this field (a manifest without it was written before the flag: after the norm).
    const auto last = l.value("last_hidden", std::string(kLastAfterNorm));
    EAGLE_CHECK(last == kLastBeforeNorm || last == kLastAfterNorm,
                Error(ErrorKind::input, "the manifest does not say where the last hidden state was taken")
                    .file(path)
                    .place("layout.last_hidden")
                    .expected(fmt::format("\"{}\" or \"{}\"", kLastBeforeNorm, kLastAfterNorm))
                    .found(last));
    m.layout.pre_norm = last == kLastBeforeNorm;
    m.layout.has_argmax = l.at("target_argmax").get<bool>();
    m.aux_layer_ids = j.at("aux_layer_ids").get<std::vector<std::int64_t>>();
    m.target = j.at("target");
    m.options = j.at("options");
    m.complete = j.at("complete").get<bool>();
    for (const auto& s : j.at("shards"))
      m.shards.push_back({s.at("split").get<std::string>(), s.at("index").get<std::int64_t>(),
                          s.at("first_sample").get<std::int64_t>(), s.at("samples").get<std::int64_t>(),
                          s.at("tokens").get<std::int64_t>(), s.at("file").get<std::string>()});
  } catch (const json::exception& e) {
    throw Error(ErrorKind::input, "a manifest field is missing or of the wrong type").file(path).found(e.what());
  }
  // Bounded so that sizes computed from them (bytes per token, a shard's bytes) cannot wrap.
  constexpr std::int64_t kMaxWidth = std::int64_t{1} << 30, kMaxCount = std::int64_t{1} << 48;
  EAGLE_CHECK(m.layout.hidden_size > 0 && m.layout.hidden_size <= kMaxWidth && m.layout.aux_width >= 0 &&
                  m.layout.aux_width <= kMaxWidth && m.layout.has_argmax,
              Error(ErrorKind::input, "the manifest's layout is inconsistent")
                  .file(path)
                  .place("layout")
                  .expected(fmt::format("hidden_size in [1, {}], aux_width in [0, {}], target_argmax true", kMaxWidth,
                                        kMaxWidth))
                  .found(l_text(m.layout)));
  check_aux_ids(m, path);
  for (const auto& s : m.shards)
    EAGLE_CHECK(s.samples > 0 && s.samples <= kMaxCount && s.tokens >= 0 && s.tokens <= kMaxCount &&
                    s.first_sample >= 0 && s.first_sample <= kMaxCount && s.file.find("..") == std::string::npos &&
                    !s.file.empty() && s.file[0] != '/',
                Error(ErrorKind::input, "a shard entry is inconsistent")
                    .file(path)
                    .place(s.file)
                    .expected(fmt::format("samples in [1, {0}], tokens and first_sample in [0, {0}], a relative file",
                                          kMaxCount))
                    .found(fmt::format("samples {}, tokens {}, first_sample {}", s.samples, s.tokens, s.first_sample)));
  return m;
}

std::vector<ShardInfo> plan_shards(const std::string& split, const data::Dataset& samples,
                                   std::uint64_t bytes_per_token, std::uint64_t max_shard_bytes) {
  std::vector<ShardInfo> out;
  ShardInfo cur{split, 0, 0, 0, 0, ""};
  auto close = [&](std::int64_t next_sample) {
    cur.file = fmt::format("{}/{}-{:05d}.safetensors", kFeaturesShardDir, split, cur.index);
    out.push_back(cur);
    cur = ShardInfo{split, cur.index + 1, next_sample, 0, 0, ""};
  };
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const auto len = samples.length(i);
    if (cur.samples > 0 && static_cast<std::uint64_t>(cur.tokens + len) * bytes_per_token > max_shard_bytes)
      close(static_cast<std::int64_t>(i));
    ++cur.samples;
    cur.tokens += len;
  }
  if (cur.samples > 0) close(static_cast<std::int64_t>(samples.size()));
  return out;
}

void write_shard(const std::string& dir, const ShardInfo& shard, const std::map<std::string, torch::Tensor>& tensors) {
  model::save_safetensors((fs::path(dir) / shard.file).string(), tensors,
                          {{"format", kFeaturesFormat},
                           {"version", std::to_string(kFeaturesVersion)},
                           {"split", shard.split},
                           {"index", std::to_string(shard.index)},
                           {"first_sample", std::to_string(shard.first_sample)}});
}

bool shard_done(const std::string& dir, const ShardInfo& shard, const FeatureLayout& layout) {
  const auto path = fs::path(dir) / shard.file;
  std::error_code ec;
  if (!fs::exists(path, ec)) return false;
  check_shard(model::SafetensorsFile::open(path.string()), shard, layout);
  return true;
}

std::shared_ptr<const FeatureStore> open_dumped_features(const std::string& dir, const FeatureManifest& manifest,
                                                         const data::Dataset& train, const data::Dataset* validation,
                                                         std::int64_t vocab_size) {
  return std::make_shared<DumpedStore>(dir, manifest, train, validation, vocab_size);
}

}  // namespace eagle::features
