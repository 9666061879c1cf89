// Features from vLLM servers (see server_store.h): worker threads send the planned samples'
// completion requests, wait on each file's lock, read and delete the file; read() takes a sample's
// features from them (or requests an unplanned sample itself) and forgets them once all its tokens
// were read.
#include "eagle/features/server_store.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "eagle/features/server_files.h"
#include "eagle/model/dtype.h"
#include "eagle/model/safetensors.h"
#include "eagle/model/shape_check.h"
#include "eagle/server/http_client.h"
#include "eagle/util/error.h"
#include "eagle/util/log.h"

namespace eagle::features {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

struct ServerFeatures::Impl {
  struct Entry {
    std::int64_t sample = 0;
    bool started = false, done = false, planned = true;
    std::optional<Error> error;
    std::vector<std::uint8_t> hidden;  // [T, slots, H] in the layout's dtype
    std::vector<std::int64_t> tokens;  // token_ids [T]
    std::int64_t consumed = 0;         // tokens read so far
  };

  server::ServerSettings settings;
  mutable std::optional<server::UrlRotation> urls;  // set in the constructor
  server::ServedModel model;
  std::vector<std::int32_t> ids;      // every store sample's token ids, concatenated
  std::vector<std::int64_t> offsets;  // sample s: ids[offsets[s], offsets[s + 1])
  mutable FeatureLayout layout;       // its dtype set by the probe (in the constructor)
  mutable bool dtype_known = false;
  std::int64_t slots = 0, n_aux = 0;

  mutable std::mutex mu;
  mutable std::condition_variable cv;
  mutable std::deque<std::shared_ptr<Entry>> queue;  // planned samples in plan order, until consumed
  mutable std::vector<std::thread> threads;
  mutable bool stop = false, planning = false;
  mutable Counters counters;
  mutable std::atomic<std::int64_t> next_request{0};  // this process's request ids: request_prefix + number

  std::int64_t length(std::int64_t s) const { return offsets[s + 1] - offsets[s]; }

  // Sleeps wait_s seconds or until the store stops; true when it stopped. A stop signal
  // (settings.cancel) ends the sleep with Error(interrupted).
  bool stopped(double wait_s) const {
    const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait_s));
    std::unique_lock lock(mu);
    for (;;) {
      check_cancel("the backoff before the next try");
      if (stop || Clock::now() >= end) return stop;
      cv.wait_until(lock, std::min(end, Clock::now() + std::chrono::milliseconds(50)));
    }
  }
  // The planner's check: never throws (a stop signal ends the workers' waits, and the store stops).
  bool stopping() const {
    std::lock_guard lock(mu);
    return stop;
  }
  void check_cancel(const std::string& what) const {
    if (settings.cancel && settings.cancel->load())
      throw Error(ErrorKind::interrupted, "stopped while waiting for the target server")
          .file(settings.urls)
          .place(what);
  }

  // The sample's completion request, the lock wait and the file: hidden states and tokens.
  void fetch(Entry& e) const {
    const std::string what = fmt::format("the hidden states of sample {}", e.sample);
    std::int64_t retries = 0;
    const auto first = urls->start();
    server::with_retries(
        settings, what,
        [&](std::int64_t attempt) {
          fetch_once(urls->at(first, attempt), e);
          return 0;
        },
        [&](double w) { return stopped(w); }, &retries);
    std::lock_guard lock(mu);
    counters.requests += 1;
    counters.retries += retries;
    counters.bytes += static_cast<std::int64_t>(e.hidden.size());
  }

  void fetch_once(const server::HttpUrl& url, Entry& e) const {
    const auto t0 = Clock::now();
    const std::string id = settings.request_prefix + std::to_string(next_request++);
    const std::vector<std::int64_t> prompt(ids.begin() + offsets[e.sample], ids.begin() + offsets[e.sample + 1]);
    const auto j =
        server::completions(url, model.id, prompt, /*max_tokens=*/1, {}, settings.timeout_s, settings.cancel, id);
    const auto* kv =
        j.contains("kv_transfer_params") && j["kv_transfer_params"].is_object() ? &j["kv_transfer_params"] : nullptr;
    EAGLE_CHECK(kv && kv->contains("hidden_states_path") && (*kv)["hidden_states_path"].is_string(),
                Error(ErrorKind::input, "the server's answer names no hidden-states file")
                    .file(url.text)
                    .place("/v1/completions: kv_transfer_params.hidden_states_path")
                    .found(j.dump().substr(0, 300))
                    .hint("start vLLM with --speculative-config method extract_hidden_states and --kv-transfer-config "
                          "kv_connector ExampleHiddenStatesConnector (docs/offline.md)"));
    const std::string path = own_file(url, settings.storage, (*kv)["hidden_states_path"].get<std::string>(), id);
    // Deleted however the read ends (unlink removes a planted link, never what it points to).
    struct Remove {
      const std::string& path;
      ~Remove() {
        ::unlink(path.c_str());
        ::unlink((path + ".lock").c_str());
      }
    } remove{path};
    wait_for_file(url, path, t0);
    read_file(path, e);
  }

  void wait_for_file(const server::HttpUrl& url, const std::string& path, Clock::time_point t0) const {
    wait_for_lock(url, path, settings.timeout_s, t0, [&] { check_cancel("the lock of " + path); });
  }

  void read_file(const std::string& path, Entry& e) const {
    const auto f = model::SafetensorsFile::open(path, util::MappedFile::Links::refuse);
    EAGLE_CHECK(f.contains("hidden_states") && f.contains("token_ids"),
                Error(ErrorKind::input, "a hidden-state file lacks hidden_states or token_ids").file(path));
    const auto shape = f.shape("hidden_states");
    const auto T = length(e.sample);
    if (!dtype_known) {
      const auto d = f.dtype("hidden_states");
      EAGLE_CHECK(d == torch::kBFloat16 || d == torch::kFloat16 || d == torch::kFloat32,
                  Error(ErrorKind::input, "hidden states must be bfloat16, float16 or float32")
                      .file(path)
                      .found(c10::toString(d)));
      layout.dtype = d;
      dtype_known = true;
    }
    EAGLE_CHECK(
        shape.size() == 3 && shape[0] == T && shape[1] == slots && shape[2] == layout.hidden_size &&
            f.dtype("hidden_states") == layout.dtype,
        Error(ErrorKind::input, "the server's hidden states are of another shape or dtype")
            .file(path)
            .place(fmt::format("hidden_states of sample {}", e.sample))
            .expected(fmt::format("{} [{}, {}, {}]", model::dtype_name(layout.dtype), T, slots, layout.hidden_size))
            .found(model::tensor_text(f.dtype("hidden_states"), shape))
            .hint(fmt::format("the head reads {} aux layers plus the last: start vLLM with "
                              "eagle_aux_hidden_state_layer_ids = the aux ids, then num_hidden_layers ({} "
                              "values), for a target of hidden size {} (docs/offline.md)",
                              n_aux, slots, layout.hidden_size)));
    // The connector writes torch.tensor(prompt_token_ids): int64 [T]. Another dtype or shape is not
    // converted (a float rounds ids above 2^24): refused by name.
    const auto tdtype = f.dtype("token_ids");
    const auto tshape = f.shape("token_ids");
    EAGLE_CHECK((tdtype == torch::kInt64 || tdtype == torch::kInt32) && tshape.size() == 1 && tshape[0] == T,
                Error(ErrorKind::input, "the server's token_ids are of another dtype or shape")
                    .file(path)
                    .place(fmt::format("token_ids of sample {}", e.sample))
                    .expected(fmt::format("int64 or int32 [{}]", T))
                    .found(model::tensor_text(tdtype, tshape)));
    const auto tokens = f.get("token_ids").to(torch::kInt64).contiguous();
    e.tokens.assign(tokens.data_ptr<std::int64_t>(), tokens.data_ptr<std::int64_t>() + T);
    // The features are the prompt's: every token id equal to the sample's (the probe too).
    for (std::int64_t k = 0; k < T; ++k)
      EAGLE_CHECK(e.tokens[static_cast<std::size_t>(k)] == ids[static_cast<std::size_t>(offsets[e.sample] + k)],
                  Error(ErrorKind::input, "the server computed hidden states for other tokens than the sample's")
                      .file(path)
                      .place(fmt::format("sample {}, token_ids[{}]", e.sample, k))
                      .expected(std::to_string(ids[static_cast<std::size_t>(offsets[e.sample] + k)]))
                      .found(std::to_string(e.tokens[static_cast<std::size_t>(k)])));
    const auto hs = f.get("hidden_states").contiguous();
    const auto* p = static_cast<const std::uint8_t*>(hs.data_ptr());
    e.hidden.assign(p, p + hs.numel() * static_cast<std::int64_t>(c10::elementSize(layout.dtype)));
  }

  // A worker: takes the first planned sample no one requests yet, requests it, marks it done.
  void work() const {
    for (;;) {
      std::shared_ptr<Entry> e;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] {
          if (stop) return true;
          for (auto& q : queue)
            if (!q->started) return true;
          return false;
        });
        if (stop) return;
        for (auto& q : queue)
          if (!q->started) {
            e = q;
            break;
          }
        e->started = true;
      }
      std::optional<Error> error;
      try {
        fetch(*e);
      } catch (const Error& err) {
        error = err;
      } catch (const std::exception& ex) {
        error = Error(ErrorKind::internal, ex.what());
      } catch (...) {
        error = Error(ErrorKind::internal, "an unknown failure while requesting hidden states");
      }
      std::lock_guard lock(mu);
      e->done = true;
      e->error = error;
      cv.notify_all();
    }
  }
};

ServerFeatures::ServerFeatures(server::ServerSettings settings, server::ServedModel model,
                               const std::vector<const data::Dataset*>& splits, std::int64_t hidden_size,
                               std::int64_t n_aux)
    : impl_(std::make_unique<Impl>()) {
  auto& m = *impl_;
  m.settings = std::move(settings);
  m.urls.emplace(m.settings);
  m.model = std::move(model);
  m.n_aux = n_aux;
  m.slots = n_aux + 1;
  m.offsets.push_back(0);
  for (const auto* ds : splits)
    for (std::size_t i = 0; i < ds->size(); ++i) {
      for (std::int64_t p = 0; p < ds->length(i); ++p) m.ids.push_back(static_cast<std::int32_t>(ds->token(i, p)));
      m.offsets.push_back(static_cast<std::int64_t>(m.ids.size()));
    }
  source_ = m.settings.urls;
  // What earlier requests of this run (this output_dir and rank) left in the storage folder: a killed
  // run's in-flight files and locks.
  if (const auto n = remove_own_files(m.settings.storage, m.settings.request_prefix))
    log::info("data", "removed {} file(s) that earlier requests of this run left in {}", n, m.settings.storage);
  // The probe: the first sample's features define the dtype; their shape is checked against the target.
  Impl::Entry probe;
  probe.sample = 0;
  m.layout.hidden_size = hidden_size;
  m.layout.aux_width = n_aux * hidden_size;
  m.layout.pre_norm = true;
  m.layout.has_argmax = false;
  m.fetch(probe);  // its errors keep their own hints (the retry hint of a server down, the layers of a shape)
  layout_ = m.layout;
  log::info("data", "target server {} serves \"{}\" (max_model_len {}): hidden states {} [T, {}, {}] per request",
            m.settings.urls, m.model.id, m.model.max_model_len, model::dtype_name(layout_.dtype), m.slots, hidden_size);
  log::info("data", "request ids {}N: their files in {} are read and deleted, nothing else there",
            m.settings.request_prefix, m.settings.storage);
}

ServerFeatures::~ServerFeatures() {
  const auto c = counters();
  log::info("data", "target server: {} requests ({} retried), {:.1f} MB of features, {:.2f} s waited for them in reads",
            c.requests, c.retries, static_cast<double>(c.bytes) / 1e6, c.wait_s);
  {
    std::lock_guard lock(impl_->mu);
    impl_->stop = true;
    impl_->cv.notify_all();
  }
  for (auto& t : impl_->threads) t.join();
  // Files of requests stopped in flight that the server wrote meanwhile (a later run removes those it writes after).
  remove_own_files(impl_->settings.storage, impl_->settings.request_prefix);
}

void ServerFeatures::prefetch(const data::Sampler& sampler, std::int64_t batches,
                              const std::vector<std::int64_t>& samples) const {
  auto& m = *impl_;
  const auto workers = std::max<std::int64_t>(1, m.settings.inflight);
  m.planning = batches > 0;
  for (std::int64_t w = 0; w < workers; ++w) m.threads.emplace_back([&m] { m.work(); });
  // The planner: the sampler's next batches, samples in the order the trainer reads them.
  m.threads.emplace_back([&m, plan = sampler, samples, batches, workers]() mutable {
    for (std::int64_t b = 0; b < batches && !m.stopping(); ++b) {
      const auto next = plan.next();
      for (const auto& row : next.row_samples)
        for (const auto s : row) {
          std::unique_lock lock(m.mu);
          m.cv.wait(lock, [&] { return m.stop || static_cast<std::int64_t>(m.queue.size()) < workers; });
          if (m.stop) return;
          auto e = std::make_shared<Impl::Entry>();
          e->sample = samples[static_cast<std::size_t>(s)];
          m.queue.push_back(std::move(e));
          m.cv.notify_all();
        }
    }
    std::lock_guard lock(m.mu);
    m.planning = false;
    m.cv.notify_all();
  });
}

void ServerFeatures::read(std::int64_t sample, std::int64_t pos, std::int64_t n, const std::int32_t*, void* aux,
                          void* last, std::int64_t*) const {
  auto& m = *impl_;
  const auto t0 = Clock::now();
  std::shared_ptr<Impl::Entry> e;
  {
    std::unique_lock lock(m.mu);
    // The planner may not have reached the sample yet: wait while it can still add it.
    const auto workers = std::max<std::int64_t>(1, m.settings.inflight);
    m.cv.wait(lock, [&] {
      for (auto& q : m.queue)
        if (q->sample == sample) {
          e = q;
          return true;
        }
      return m.stop || !m.planning || static_cast<std::int64_t>(m.queue.size()) >= workers;
    });
    if (e) m.cv.wait(lock, [&] { return e->done; });
  }
  if (!e) {  // not planned: requested here
    e = std::make_shared<Impl::Entry>();
    e->sample = sample;
    e->planned = false;
    m.fetch(*e);
    e->done = true;
  }
  {
    std::lock_guard lock(m.mu);
    m.counters.wait_s += seconds_since(t0);
  }
  if (e->error) throw *e->error;
  const auto H = m.layout.hidden_size;
  const auto elem = static_cast<std::int64_t>(c10::elementSize(m.layout.dtype));
  const std::int64_t row_bytes = m.slots * H * elem;
  const auto* base = e->hidden.data();
  const auto bad = first_non_finite(base + pos * row_bytes, n * m.slots * H, m.layout.dtype);
  EAGLE_CHECK(bad < 0, Error(ErrorKind::input, "the server's hidden states hold NaN or Inf")
                           .file(m.settings.urls)
                           .place(fmt::format("sample {}, position {}, layer slot {}", sample,
                                              pos + bad / (m.slots * H), bad % (m.slots * H) / H))
                           .expected("finite values"));
  for (std::int64_t k = 0; k < n; ++k) {
    const auto* t = base + (pos + k) * row_bytes;
    if (m.n_aux > 0 && aux)
      std::memcpy(static_cast<std::uint8_t*>(aux) + k * m.n_aux * H * elem, t,
                  static_cast<std::size_t>(m.n_aux * H * elem));
    std::memcpy(static_cast<std::uint8_t*>(last) + k * H * elem, t + (m.slots - 1) * H * elem,
                static_cast<std::size_t>(H * elem));
  }
  if (!e->planned) return;
  std::lock_guard lock(m.mu);
  e->consumed += n;
  if (e->consumed >= m.length(sample)) {
    m.queue.erase(std::find(m.queue.begin(), m.queue.end(), e));
    m.cv.notify_all();
  }
}

ServerFeatures::Counters ServerFeatures::counters() const {
  std::lock_guard lock(impl_->mu);
  return impl_->counters;
}

}  // namespace eagle::features
