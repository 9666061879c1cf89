// Regeneration through vLLM servers (eagle-train generate --target_server): the same contract as
// generate::generate, for targets that do not fit in-process. Each sample is a data::Regeneration as
// in-process; per reply one POST /v1/completions with the whole output so far as prompt token ids,
// max_tokens the reply's budget, the sampling options written out (vLLM's model defaults otherwise
// apply), ignore_eos with stop_token_ids = the end ids (so exactly those end a reply), and
// return_token_ids; the answer's token ids are accepted one by one. generate_batch_size samples are
// in flight at once (worker threads), spread round-robin over the URLs; samples are emitted in input
// order.
#pragma once

#include <cstddef>
#include <functional>

#include <nlohmann/json.hpp>

#include "eagle/data/dataset.h"
#include "eagle/data/regeneration.h"
#include "eagle/generate/generate.h"
#include "eagle/server/server_client.h"

namespace eagle::generate {

// Regenerates samples first .. dataset.size()-1 through the servers of `settings` (checked by
// server::check_servers). stop_requested is polled every 50 ms; once true, requests in flight are
// cancelled, the samples finished in order are emitted and it returns interrupted. A server that
// stays down after the retries (or an answer refused by name: no token_ids, tokens past an end id,
// a reply stopped early) emits the samples finished in order and throws that Error.
GenerateResult generate_from_server(server::ServerSettings settings, const server::ServedModel& model,
                                    const data::Dataset& dataset, std::size_t first, const GenerateSettings& gs,
                                    const EmitFn& emit, const std::function<bool()>& stop_requested = {});

}  // namespace eagle::generate
