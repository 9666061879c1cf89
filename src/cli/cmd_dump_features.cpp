// eagle-train dump-features: the target's features of a dataset stored for offline training
// (features/dump.h, docs/offline.md).
#include "eagle/cli/commands.h"
#include "eagle/features/dump.h"

namespace eagle::cli {

void run_dump_features(const config::Options& opts, const Invocation& argv) { features::dump_features(opts); }

}  // namespace eagle::cli
