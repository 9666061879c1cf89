// eagle-train generate's job (docs/data.md): the target rewrites the replies of pretokenized
// samples, in-process (generate.h) or through vLLM servers (server_generate.h), into JSONL that
// prepare and train read. One run per output at a time (a lock beside it); a finished output is
// recognised without the lock, a stopped one resumed where it stopped (the same settings required),
// the finished samples committed at least every second.
#pragma once

#include "eagle/config/options.h"

namespace eagle::generate {

// Stopped by a signal: Error(interrupted), what was finished committed. A failure (a server that
// stays down, an answer refused by name) is thrown after the samples emitted before it are committed.
void regenerate(const config::Options& opts);

}  // namespace eagle::generate
