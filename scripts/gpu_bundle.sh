#!/usr/bin/env bash
# The build's dependencies besides LibTorch and the compiler, for a GPU machine with no package
# registry and no Debian -dev packages: downloads the Debian packages of CLI11, nlohmann-json,
# spdlog (+ fmt and both runtime libraries), Catch2 v2, simdjson (+ runtime library) and zlib
# (headers + library) in the versions installed here, unpacks them into .cache/gpu-bundle (ignored by
# git, a few MB) and writes bundle.cmake there: the CMake settings that point the build at them.
# scripts/gpu_check.sh builds against that folder and the machine's Python torch.
#
#   scripts/gpu_bundle.sh           make the bundle (needs apt-get download, i.e. a Debian registry)
#   scripts/gpu_bundle.sh --prove   also build and run a CPU dry run of scripts/gpu_check.sh in a mount
#                                   namespace where this machine's copies of those packages are hidden
#                                   (root; see docs/developer.md "GPU checks")
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUNDLE="${EAGLE_GPU_BUNDLE:-$ROOT/.cache/gpu-bundle}"
ARCH_DIR=usr/lib/x86_64-linux-gnu
# -dev packages (headers, CMake configs, link symlinks) and the runtime libraries they point at.
DEV_PACKAGES=(libcli11-dev nlohmann-json3-dev libspdlog-dev libfmt-dev catch2 libsimdjson-dev zlib1g-dev)
RUNTIME_PACKAGES=(libspdlog1.10 libfmt9 libsimdjson14 zlib1g)

make_bundle() {
  local tmp pkg version
  tmp="$(mktemp -d)"
  chmod 755 "$tmp"  # apt downloads as its own user
  trap 'rm -rf "$tmp"' RETURN
  local specs=()
  for pkg in "${DEV_PACKAGES[@]}" "${RUNTIME_PACKAGES[@]}"; do
    version="$(dpkg-query -W -f='${Version}' "$pkg")"  # the versions this machine builds and tests with
    specs+=("$pkg=$version")
  done
  (cd "$tmp" && apt-get download "${specs[@]}" >/dev/null)
  rm -rf "$BUNDLE.tmp"
  mkdir -p "$BUNDLE.tmp"
  for deb in "$tmp"/*.deb; do dpkg -x "$deb" "$BUNDLE.tmp"; done
  rm -rf "$BUNDLE.tmp/usr/share/doc" "$BUNDLE.tmp/usr/share/man" "$BUNDLE.tmp/usr/share/lintian"
  # zlib1g-dev's libz.so points at /lib/...: make absolute links relative, inside the bundle.
  while IFS= read -r link; do
    target="$(readlink "$link")"
    [[ "$target" = /* ]] || continue
    [[ -e "$BUNDLE.tmp$target" ]] || { echo "gpu_bundle: $link points outside the bundle ($target)" >&2; exit 1; }
    ln -sfn "$(realpath --relative-to="$(dirname "$link")" "$BUNDLE.tmp$target")" "$link"
  done < <(find "$BUNDLE.tmp" -type l)
  # What a build against the bundle sets, relative to this file, so the folder can move.
  cat >"$BUNDLE.tmp/bundle.cmake" <<EOF
# Written by scripts/gpu_bundle.sh: cmake -C this-file points find_package at the bundle.
get_filename_component(_b "\${CMAKE_CURRENT_LIST_DIR}" ABSOLUTE)
set(CLI11_DIR "\${_b}/usr/share/cmake/CLI11" CACHE PATH "")
set(nlohmann_json_DIR "\${_b}/usr/share/cmake/nlohmann_json" CACHE PATH "")
set(fmt_DIR "\${_b}/$ARCH_DIR/cmake/fmt" CACHE PATH "")
set(spdlog_DIR "\${_b}/$ARCH_DIR/cmake/spdlog" CACHE PATH "")
set(simdjson_DIR "\${_b}/$ARCH_DIR/cmake/simdjson" CACHE PATH "")
set(Catch2_DIR "\${_b}/usr/lib/cmake/Catch2" CACHE PATH "")
set(ZLIB_INCLUDE_DIR "\${_b}/usr/include" CACHE PATH "")
set(ZLIB_LIBRARY "\${_b}/$ARCH_DIR/libz.so" CACHE FILEPATH "")
EOF
  {
    echo "# scripts/gpu_bundle.sh, $(date -u '+%Y-%m-%d %H:%M UTC'), from $(. /etc/os-release && echo "$PRETTY_NAME")"
    for spec in "${specs[@]}"; do echo "$spec"; done
    # The newest glibc symbol version the bundled libraries need (the GPU machine must have it).
    echo "glibc $(find "$BUNDLE.tmp" -name '*.so.*' -type f -exec objdump -T {} \; | grep -o 'GLIBC_[0-9.]*' |
      sed 's/GLIBC_//' | sort -V | tail -1)"
  } >"$BUNDLE.tmp/MANIFEST"
  rm -rf "$BUNDLE"
  mv "$BUNDLE.tmp" "$BUNDLE"
  echo "gpu_bundle: $BUNDLE ($(du -sh "$BUNDLE" | cut -f1), $(find "$BUNDLE" -type f | wc -l) files)"
  cat "$BUNDLE/MANIFEST"
}

# In a private mount namespace, this machine's files of the bundled packages are replaced by empty
# ones (headers, CMake configs, libraries; zlib's runtime library stays, other programs need it):
# a build or a run that used any of them instead of the bundle's copy fails.
prove() {
  local files=()
  for pkg in "${DEV_PACKAGES[@]}" libspdlog1.10 libfmt9 libsimdjson14; do
    while IFS= read -r f; do
      [[ -f "$f" && ! -L "$f" ]] && files+=("$f")
    done < <(dpkg -L "$pkg")
  done
  printf '%s\n' "${files[@]}" >"$BUNDLE/hidden-files.txt"
  echo "gpu_bundle: hiding ${#files[@]} system files of the bundled packages (list: $BUNDLE/hidden-files.txt)"
  # The venv's torch, as scripts/setup.sh made it (the system python3 has none here).
  EAGLE_PYTHON="${EAGLE_PYTHON:-${EAGLE_DEPS_DIR:-$HOME/.cache/eagle-train}/venv/bin/python}" \
    EAGLE_BUILD_DIR="${EAGLE_BUILD_DIR:-$ROOT/build-bundle}" unshare -m --propagation private bash -c '
    set -euo pipefail
    while IFS= read -r f; do mount --bind /dev/null "$f"; done <"$1/hidden-files.txt"
    test ! -s /usr/include/zlib.h && test ! -s /usr/include/spdlog/spdlog.h
    echo "gpu_bundle: system copies hidden; running scripts/gpu_check.sh --device cpu"
    "$2/scripts/gpu_check.sh" --device cpu' _ "$BUNDLE" "$ROOT"
}

[[ -d "$BUNDLE" && "${1:-}" = --prove ]] || make_bundle
[[ "${1:-}" = --prove ]] && prove
exit 0
