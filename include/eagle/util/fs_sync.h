// Files on disk: durable writes (a temporary name beside the target, fsync, rename, fsync of the
// folder, so a crash leaves either the old file or the new one, never a torn one), and the check
// that what the tool is about to read is a regular file.
#pragma once

#include <filesystem>
#include <functional>
#include <ostream>
#include <string_view>
#include <vector>

#include "eagle/util/error.h"

namespace eagle::util {

// The one temporary-name rule of every writer: ".tmp-<name>.<pid>" beside `path` (hidden, and the pid
// keeps two writers of one target apart).
std::filesystem::path temporary_name(const std::filesystem::path& path);
// What killed writers of `path` left: its temporary_name files or folders (".tmp-<name>.<pid>") whose process
// is gone, removed; returns their paths. A live pid's belongs to a writer still at work, and a pid running
// again may be another process now: both are kept.
std::vector<std::filesystem::path> remove_dead_temporaries(const std::filesystem::path& path);
// The rule for a folder written under a lock whose leftover the next writer removes by name
// (checkpoints): ".tmp-<name>" beside `path`.
std::filesystem::path temporary_folder_name(const std::filesystem::path& path);
// Whether the file name `name` (no folder) is a leftover temporary: one of the two names above, or a
// spelling of the writers before the one rule ("<name>.tmp.<pid>", "<name>.tmp-<pid>"), so a folder
// written by an older version is cleaned too. With `of`: only temporaries of the file named `of`.
bool is_temporary(std::string_view name, std::string_view of = {});

// Writes `path` atomically: `write` fills a stream on temporary_name(path), which is flushed, fsync'd
// and renamed over `path`, then the folder is fsync'd; a crash leaves the old file or the new one.
// Throws Error(output) naming the path on failure; on any failure (also `write` throwing) the
// temporary is removed.
void write_atomic(const std::filesystem::path& path, const std::function<void(std::ostream&)>& write);
// write_atomic of `content`.
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
