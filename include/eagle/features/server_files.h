// The files a vLLM hidden-states server names (train/eval --target_server, docs/offline.md): only
// files of this run's requests, directly in the server's storage folder, are waited on, read and
// deleted; never through a link, never blocking on a planted FIFO.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "eagle/server/http_client.h"

namespace eagle::features {

// The request-id prefix of this process: "eagle-" + 16 hex digits of FNV-1a of output_dir's
// canonical path (random when empty: eval) + "-r" + rank + "-". The same output_dir and rank give the
// same prefix, so a later run (a resume) knows the files its earlier requests left.
std::string server_request_prefix(const std::string& output_dir, std::int64_t rank);

// The path the server answered for request `id`, normalised; Error(input, exit 3) naming it unless it
// is absolute, has no "." or ".." component, lies directly in `storage` and its name holds the id
// followed by "-" and ends in .safetensors (vLLM: STORAGE/cmpl-ID-0-SUFFIX.safetensors).
std::string own_file(const server::HttpUrl& url, const std::string& storage, const std::string& path,
                     const std::string& id);

// Waits until PATH.lock is free to lock shared (the connector holds it exclusively until PATH is
// written), or PATH exists without a lock; polls every 5 ms, calling poll() (which may throw: a stop
// signal). Error(input) naming the lock when it is a symbolic link or not a regular file (a FIFO is
// opened non-blocking, so it never blocks), or naming PATH when neither appears within timeout_s of t0.
void wait_for_lock(const server::HttpUrl& url, const std::string& path, double timeout_s,
                   std::chrono::steady_clock::time_point t0, const std::function<void()>& poll);

// Deletes the regular files in `storage` named after requests of `prefix` (*PREFIX*.safetensors and
// their .lock); returns how many. A folder that cannot be listed holds none.
std::int64_t remove_own_files(const std::string& storage, const std::string& prefix);

}  // namespace eagle::features
