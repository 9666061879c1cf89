// eagle-train prepare: not built yet (see the issue that builds it).
#include "eagle/cli/commands.h"
#include "eagle/util/error.h"

namespace eagle::cli {

void run_prepare(const config::Options&) {
  throw Error(ErrorKind::not_built, "the prepare subcommand is not built yet in this version");
}

}  // namespace eagle::cli
