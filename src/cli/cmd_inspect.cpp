// eagle-train inspect: not built yet (see the issue that builds it).
#include "eagle/cli/commands.h"
#include "eagle/util/error.h"

namespace eagle::cli {

void run_inspect(const config::Options&) {
  throw Error(ErrorKind::not_built, "the inspect subcommand is not built yet in this version");
}

}  // namespace eagle::cli
