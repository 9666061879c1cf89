// Files on disk: durable writes (a temporary name beside the target, fsync, rename, fsync of the
// folder, so a crash leaves either the old file or the new one, never a torn one), and the check
// that what the tool is about to read is a regular file.
#pragma once

#include <filesystem>
#include <string_view>

#include "eagle/util/error.h"

namespace eagle::util {

// Writes `content` to `path` atomically (temporary ".tmp-<name>.<pid>" in the same folder, fsync,
// rename over `path`, fsync of the folder). Throws Error(output) naming the path on failure.
void write_file_atomic(const std::filesystem::path& path, std::string_view content);

// fsync of one file or folder; throws Error(output) naming it on failure.
void fsync_path(const std::filesystem::path& path);

// fsync of every regular file below `folder` (recursively), of every sub-folder, then of `folder`.
void fsync_tree(const std::filesystem::path& folder);

// Throws Error(kind) naming path and what it found unless it is a regular file (after symlinks).
// Called before opening anything the tool reads: opening a FIFO would block forever, a device or
// a folder would fail later with a less useful message. `what` names the file ("the config file").
void require_regular_file(const std::filesystem::path& path, ErrorKind kind, std::string_view what);

}  // namespace eagle::util
