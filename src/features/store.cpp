// Feature stores (see feature_store.h): the manifest and shards of dump-features folders, and the
// per-row hidden-state files of speculators folders.
#include "eagle/features/store.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "eagle/data/speculators_folder.h"
#include "eagle/model/dtype.h"
#include "eagle/model/safetensors.h"
#include "eagle/model/shape_check.h"
#include "eagle/util/error.h"
#include "eagle/util/hash.h"
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

std::string l_text(const FeatureLayout& l) {
  return fmt::format("hidden_size {}, aux_width {}, target_argmax {}", l.hidden_size, l.aux_width, l.has_argmax);
}

Error shard_error(const std::string& file, const std::string& place) {
  return Error(ErrorKind::input, "a feature shard does not match its manifest")
      .file(file)
      .place(place)
      .hint("the folder was changed after the dump; dump the features again");
}

// Checks a shard file against its manifest entry and layout; returns its sample offsets.
const std::int64_t* check_shard(const model::SafetensorsFile& f, const ShardInfo& s, const FeatureLayout& l) {
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
  const auto* off = f.get("sample_offsets").data_ptr<std::int64_t>();
  EAGLE_CHECK(off[0] == 0 && off[s.samples] == s.tokens, shard_error(f.path(), "sample_offsets"));
  for (std::int64_t j = 0; j < s.samples; ++j)
    EAGLE_CHECK(off[j + 1] >= off[j], shard_error(f.path(), fmt::format("sample_offsets[{}]", j + 1)));
  return off;
}

// A dump-features folder: its shards, mapped.
class DumpedStore : public FeatureStore {
 public:
  DumpedStore(const std::string& dir, const FeatureManifest& m, const data::Dataset& train,
              const data::Dataset* validation)
      : train_samples_(static_cast<std::int64_t>(train.size())) {
    layout_ = m.layout;
    source_ = dir;
    for (const auto& s : m.shards) {
      const data::Dataset* ds = s.split == "train" ? &train : s.split == "validation" ? validation : nullptr;
      EAGLE_CHECK(ds != nullptr && s.first_sample + s.samples <= static_cast<std::int64_t>(ds->size()),
                  Error(ErrorKind::input, "a shard names samples its split does not have")
                      .file((fs::path(dir) / kFeaturesManifest).string())
                      .place(s.file));
      Shard sh{s, model::SafetensorsFile::open((fs::path(dir) / s.file).string()), nullptr, nullptr, nullptr, nullptr};
      sh.offsets = check_shard(sh.file, s, layout_);
      for (std::int64_t j = 0; j < s.samples; ++j)
        EAGLE_CHECK(sh.offsets[j + 1] - sh.offsets[j] == ds->length(static_cast<std::size_t>(s.first_sample + j)),
                    shard_error(sh.file.path(), fmt::format("sample {} of split {}", s.first_sample + j, s.split))
                        .expected(fmt::format("{} tokens (the dataset's)",
                                              ds->length(static_cast<std::size_t>(s.first_sample + j)))));
      if (layout_.aux_width > 0) sh.aux = static_cast<const std::uint8_t*>(sh.file.get("aux_hidden").data_ptr());
      sh.last = static_cast<const std::uint8_t*>(sh.file.get("last_hidden").data_ptr());
      sh.argmax = sh.file.get("target_argmax").data_ptr<std::int32_t>();
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
    EAGLE_CHECK(j < s.info.samples && pos >= 0 && pos + n <= s.offsets[j + 1] - s.offsets[j],
                Error(ErrorKind::internal, "feature read outside its sample")
                    .file(s.file.path())
                    .place(fmt::format("sample {}, positions {}..{}", sample, pos, pos + n)));
    const std::int64_t t0 = s.offsets[j] + pos;
    const auto elem = static_cast<std::int64_t>(c10::elementSize(layout_.dtype));
    if (layout_.aux_width > 0)
      std::memcpy(aux, s.aux + t0 * layout_.aux_width * elem, static_cast<std::size_t>(n * layout_.aux_width * elem));
    std::memcpy(last, s.last + t0 * layout_.hidden_size * elem,
                static_cast<std::size_t>(n * layout_.hidden_size * elem));
    for (std::int64_t k = 0; k < n; ++k) argmax[k] = s.argmax[t0 + k];
  }

 private:
  struct Shard {
    ShardInfo info;
    model::SafetensorsFile file;
    const std::int64_t* offsets;
    const std::uint8_t *aux, *last;
    const std::int32_t* argmax;
  };
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

// A speculators folder: hidden_states/hs_<row>.safetensors per row, opened when read.
class SpeculatorsStore : public FeatureStore {
 public:
  SpeculatorsStore(const std::string& dir, std::int64_t first_row, std::int64_t hidden_size, std::int64_t n_aux)
      : dir_(dir), n_aux_(n_aux) {
    source_ = dir;
    const auto f = model::SafetensorsFile::open(data::speculators_hidden_file(dir, first_row));
    EAGLE_CHECK(f.contains("hidden_states") && f.shape("hidden_states").size() == 3,
                Error(ErrorKind::input, "no hidden_states [T, layers, H] tensor").file(f.path()));
    const auto shape = f.shape("hidden_states");
    slots_ = shape[1];
    layout_.dtype = f.dtype("hidden_states");
    layout_.hidden_size = shape[2];
    layout_.aux_width = n_aux * shape[2];
    layout_.pre_norm = true;
    layout_.has_argmax = false;
    EAGLE_CHECK(layout_.hidden_size == hidden_size,
                Error(ErrorKind::input, "the hidden states are of another target")
                    .file(f.path())
                    .place("hidden_states")
                    .expected(fmt::format("hidden size {} (the target's)", hidden_size))
                    .found(std::to_string(layout_.hidden_size)));
    EAGLE_CHECK(slots_ >= 1 + n_aux && (n_aux == 0 || slots_ == 1 + n_aux),
                Error(ErrorKind::input, "the hidden states hold another number of layers")
                    .file(f.path())
                    .place("hidden_states")
                    .expected(fmt::format("{} layers: {} aux layers, then the last", n_aux + 1, n_aux))
                    .found(fmt::format("{} layers", slots_))
                    .hint("EAGLE-3 reads 3 aux layers plus the last layer (speculators' default layer ids)"));
    EAGLE_CHECK(
        layout_.dtype == torch::kBFloat16 || layout_.dtype == torch::kFloat16 || layout_.dtype == torch::kFloat32,
        Error(ErrorKind::input, "hidden states must be bfloat16, float16 or float32")
            .file(f.path())
            .found(c10::toString(layout_.dtype)));
  }

  void read(std::int64_t row, std::int64_t pos, std::int64_t n, const std::int32_t* ids, void* aux, void* last,
            std::int64_t*) const override {
    const auto f = model::SafetensorsFile::open(data::speculators_hidden_file(dir_, row));
    const auto H = layout_.hidden_size;
    EAGLE_CHECK(f.contains("hidden_states") && f.contains("token_ids"),
                Error(ErrorKind::input, "a hidden-state file lacks hidden_states or token_ids").file(f.path()));
    const auto shape = f.shape("hidden_states");
    EAGLE_CHECK(shape.size() == 3 && shape[1] == slots_ && shape[2] == H && shape[0] >= pos + n &&
                    f.dtype("hidden_states") == layout_.dtype,
                Error(ErrorKind::input, "hidden states of another shape or dtype than the folder's first row")
                    .file(f.path())
                    .place("hidden_states")
                    .expected(fmt::format("{} [>= {}, {}, {}]", model::dtype_name(layout_.dtype), pos + n, slots_, H))
                    .found(model::tensor_text(f.dtype("hidden_states"), shape)));
    const auto tokens = f.get("token_ids").to(torch::kInt64).contiguous();
    EAGLE_CHECK(tokens.dim() == 1 && tokens.size(0) == shape[0],
                Error(ErrorKind::input, "token_ids does not match hidden_states").file(f.path()).place("token_ids"));
    const auto* tok = tokens.data_ptr<std::int64_t>();
    for (std::int64_t k = 0; k < n; ++k)
      EAGLE_CHECK(tok[pos + k] == ids[k],
                  Error(ErrorKind::input, "the hidden states were computed for other tokens than the row's")
                      .file(f.path())
                      .place(fmt::format("token_ids[{}]", pos + k))
                      .expected(fmt::format("{} (input_ids of row {})", ids[k], row))
                      .found(std::to_string(tok[pos + k])));
    const auto hs = f.get("hidden_states");
    const auto* base = static_cast<const std::uint8_t*>(hs.data_ptr());
    const auto elem = static_cast<std::int64_t>(c10::elementSize(layout_.dtype));
    const std::int64_t row_bytes = slots_ * H * elem;
    for (std::int64_t k = 0; k < n; ++k) {
      const auto* t = base + (pos + k) * row_bytes;
      // Slots in ascending layer order: the aux layers first, the last layer at the end.
      if (n_aux_ > 0)
        std::memcpy(static_cast<std::uint8_t*>(aux) + k * n_aux_ * H * elem, t,
                    static_cast<std::size_t>(n_aux_ * H * elem));
      std::memcpy(static_cast<std::uint8_t*>(last) + k * H * elem, t + (slots_ - 1) * H * elem,
                  static_cast<std::size_t>(H * elem));
    }
  }

 private:
  std::string dir_;
  std::int64_t n_aux_, slots_ = 0;
};

}  // namespace

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
                {"last_hidden", m.layout.pre_norm ? "before the final norm" : "after the final norm"},
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
    m.layout.pre_norm = false;
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
                                                         const data::Dataset& train, const data::Dataset* validation) {
  return std::make_shared<DumpedStore>(dir, manifest, train, validation);
}

json target_identity(const std::string& model_dir, const std::string& architecture, std::int64_t num_hidden_layers,
                     std::int64_t hidden_size, std::int64_t vocab_size, const torch::Tensor& final_norm,
                     const torch::Tensor& lm_head) {
  // Over bf16-rounded values: the same for the target loaded in float32 or bfloat16.
  auto as_bf16_on_cpu = [](const torch::Tensor& t) { return t.to(torch::kCPU, torch::kBFloat16).contiguous(); };
  const auto norm = as_bf16_on_cpu(final_norm);
  const auto rows = as_bf16_on_cpu(lm_head.narrow(0, 0, std::min<std::int64_t>(16, lm_head.size(0))));
  std::uint64_t h = util::fnv1a(norm.data_ptr(), static_cast<std::size_t>(norm.nbytes()));
  h = util::fnv1a(rows.data_ptr(), static_cast<std::size_t>(rows.nbytes()), h);
  return json{
      {"model_name_or_path", model_dir}, {"architecture", architecture}, {"num_hidden_layers", num_hidden_layers},
      {"hidden_size", hidden_size},      {"vocab_size", vocab_size},     {"weights_fnv1a", fmt::format("{:016x}", h)}};
}

std::shared_ptr<const FeatureStore> open_speculators_features(const std::string& dir, std::int64_t first_row,
                                                              std::int64_t hidden_size, std::int64_t n_aux) {
  return std::make_shared<SpeculatorsStore>(dir, first_row, hidden_size, n_aux);
}

}  // namespace eagle::features
