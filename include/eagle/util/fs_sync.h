// Durable file writes: write to a temporary name beside the target, fsync, rename, fsync the folder,
// so a crash leaves either the old file or the new one, never a torn one.
#pragma once

#include <filesystem>
#include <string_view>

namespace eagle::util {

// Writes `content` to `path` atomically (temporary ".tmp-<name>.<pid>" in the same folder, fsync,
// rename over `path`, fsync of the folder). Throws Error(output) naming the path on failure.
void write_file_atomic(const std::filesystem::path& path, std::string_view content);

// fsync of one file or folder; throws Error(output) naming it on failure.
void fsync_path(const std::filesystem::path& path);

// fsync of every regular file below `folder` (recursively), of every sub-folder, then of `folder`.
void fsync_tree(const std::filesystem::path& folder);

}  // namespace eagle::util
