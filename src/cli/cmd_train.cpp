// eagle-train train: not built yet (see the issue that builds it).
#include "eagle/cli/commands.h"
#include "eagle/util/error.h"

namespace eagle::cli {

void run_train(const config::Options&) {
  throw Error(ErrorKind::not_built, "the train subcommand is not built yet in this version");
}

}  // namespace eagle::cli
