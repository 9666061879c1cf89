// eagle-train train: the training run (src/train/trainer.cpp).
#include "eagle/cli/commands.h"
#include "eagle/train/trainer.h"

namespace eagle::cli {

void run_train(const config::Options& opts, const Invocation& argv) { train::train(opts, argv); }

}  // namespace eagle::cli
