// eagle-train generate: the target rewrites the replies of pretokenized samples itself (batched,
// resumable) and the result is written as JSONL that prepare and train read (docs/data.md;
// src/generate/job.cpp).
#include "eagle/cli/commands.h"
#include "eagle/generate/job.h"

namespace eagle::cli {

void run_generate(const config::Options& opts, const Invocation& argv) { generate::regenerate(opts); }

}  // namespace eagle::cli
