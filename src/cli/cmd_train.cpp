// eagle-train train: the training run (src/train/trainer.cpp).
#include "eagle/cli/commands.h"
#include "eagle/train/init_draft.h"
#include "eagle/train/memory_estimate.h"
#include "eagle/train/trainer.h"

namespace eagle::cli {

void run_train(const config::Options& opts, const Invocation& argv) {
  if (opts.dry_run) return train::dry_run(train::with_init_draft(opts));
  train::train(opts, argv);
}

}  // namespace eagle::cli
