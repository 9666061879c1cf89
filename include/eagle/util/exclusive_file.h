// Creating a file the tool writes (a temporary, a partial output) without ever writing through a
// link someone planted at its name.
#pragma once

#include <filesystem>

#include "eagle/util/error.h"

namespace eagle::util {

// Creates `path` with O_CREAT | O_EXCL | O_NOFOLLOW (mode 0644) and returns the descriptor: a
// regular file already there is a leftover of a dead writer and is replaced; a symlink or anything
// else is refused (Error(kind) naming it), so the tool never writes through a link it did not create.
int create_exclusive(const std::filesystem::path& path, ErrorKind kind);

}  // namespace eagle::util
