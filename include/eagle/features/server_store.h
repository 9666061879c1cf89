// Target features requested from vLLM servers instead of read from disk (train/eval --target_server,
// docs/offline.md): per sample one completion request (the prompt token ids, max_tokens 1) to a
// server running the speculative method extract_hidden_states with the ExampleHiddenStatesConnector,
// which writes the sample's hidden states [T, n_aux + 1, H] and token_ids [T] to a safetensors file,
// holds its .lock until the write is complete and returns its path. The store waits on the lock,
// reads the file, deletes it and its lock, and serves the rows as a speculators folder's would be.
// Every request carries an X-Request-Id of this run (settings.request_prefix + a number), which vLLM
// puts in the file's name (STORAGE/cmpl-ID-0-SUFFIX.safetensors): a path outside settings.storage,
// relative, with a "." or ".." component or not named after its request is refused (exit 3), and
// only such files of this run are ever opened (never through a link, never blocking) or deleted.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "eagle/data/dataset.h"
#include "eagle/data/sampler.h"
#include "eagle/features/store.h"
#include "eagle/server/server_client.h"

namespace eagle::features {

class ServerFeatures : public FeatureStore {
 public:
  // Store samples 0.. are the samples of splits[0], then those of splits[1], ... (their token ids
  // are copied). One probe request for the first sample checks the features against the target:
  // hidden_states of hidden_size, n_aux + 1 layer slots, token_ids equal to the prompt, a file
  // readable here (refused by name otherwise).
  ServerFeatures(server::ServerSettings settings, server::ServedModel model,
                 const std::vector<const data::Dataset*>& splits, std::int64_t hidden_size, std::int64_t n_aux);
  ~ServerFeatures() override;

  void read(std::int64_t sample, std::int64_t pos, std::int64_t n, const std::int32_t* ids, void* aux, void* last,
            std::int64_t* argmax) const override;

  // Requests the samples of the next `batches` batches of a copy of `sampler` (the trainer's, at its
  // current position) ahead of the step, at most `inflight` samples unconsumed at a time. A sample
  // read without being planned is requested then (evaluation). A request that fails after all
  // retries (the server stays down) is thrown by the read of its sample as ErrorKind::source_down:
  // training then ends with a checkpoint of the last completed step and exit 4.
  void prefetch(const data::Sampler& sampler, std::int64_t batches,
                const std::vector<std::int64_t>& samples) const override;
  // Requests answered, their features' bytes and the seconds spent waiting for them in read().
  struct Counters {
    std::int64_t requests = 0, retries = 0, bytes = 0;
    double wait_s = 0;
  };
  Counters counters() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace eagle::features
