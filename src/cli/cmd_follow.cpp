// eagle-train follow: a draft kept current while its target changes (src/follow/follow.cpp, docs/follow.md).
#include "eagle/cli/commands.h"
#include "eagle/follow/follow.h"

namespace eagle::cli {

void run_follow(const config::Options& opts, const Invocation& argv) { follow::follow(opts, argv); }

}  // namespace eagle::cli
