// eagle-train report [RUN_DIR]: the run report (io/report.h) of a training run's folder.
#include <iostream>

#include "eagle/cli/commands.h"
#include "eagle/io/report.h"
#include "eagle/util/error.h"

namespace eagle::cli {

void run_report(const config::Options& opts, const Invocation&) {
  std::error_code ec;
  // A missing input, as a missing checkpoint or data file is (exit 3).
  if (!std::filesystem::is_directory(opts.output_dir, ec))
    throw Error(ErrorKind::input, std::filesystem::exists(opts.output_dir, ec)
                                      ? "the run folder to report on is not a folder"
                                      : "the run folder to report on does not exist")
        .file(opts.output_dir)
        .expected("the output_dir of a training run (holding metrics.jsonl)");
  std::cout << io::write_report(opts.output_dir).string() << "\n";
}

}  // namespace eagle::cli
