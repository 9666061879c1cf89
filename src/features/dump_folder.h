// The folder of a dump-features run before any feature is written: its marker, what an unfinished
// dump of this tool left (removed), what is anyone else's (refused), and where it may not be.
#pragma once

#include <filesystem>

#include "eagle/config/options.h"

namespace eagle::features {

// The file a dump writes first in a new folder, naming the tool: only a folder holding it is ever
// taken for this tool's unfinished dump and cleaned.
inline constexpr const char* kDumpMarker = ".eagle-dump";

// Refuses (Error(usage), naming both) an --output equal to, inside or around --data_path or
// --eval_data_path: the dump would write over, or clean away, the input it reads.
void check_output_apart(const config::Options& o, const std::filesystem::path& out);

// A folder without a manifest, under the lock: empty (the marker is written), or this tool's
// unfinished dump (its marker and only names a dump writes: those are removed, the marker kept);
// anything else is refused by name (Error(output)).
void prepare_fresh(const std::filesystem::path& out);

// Under the lock: leftover temporaries (util::is_temporary; only dead writers leave them, as a live one
// holds the lock) in the folder and in features/ are removed;
// a symlink where the dump writes (features/, target/, a data file) is refused by name, never
// followed.
void clean_folder(const std::filesystem::path& out);

}  // namespace eagle::features
