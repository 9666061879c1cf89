#!/usr/bin/env bash
# How third_party/gloo was produced: headers of pytorch/gloo at PyTorch 2.11's
# third_party/gloo pin, plus a hand-written gloo/config.h (see docs/distributed.md, "Gloo headers").
#   GLOO_GIT: a clone of https://github.com/pytorch/gloo (bare is fine)
set -euo pipefail
GLOO_GIT=${GLOO_GIT:?path to a pytorch/gloo git dir}
COMMIT=3135b0b41b67dde590eef0938a0bf3d6238df5f7
OUT=$(cd "$(dirname "$0")" && pwd)/gloo
tmp=$(mktemp -d)
git --git-dir="$GLOO_GIT" archive "$COMMIT" gloo LICENSE | tar -x -C "$tmp"
find "$tmp/gloo" -type f ! -name '*.h' -delete
rm -rf "$tmp/gloo/test" "$tmp/gloo/benchmark" "$tmp/gloo/examples"
find "$tmp/gloo" -type d -empty -delete
mkdir -p "$OUT"; cp -r "$tmp/gloo" "$tmp/LICENSE" "$OUT/"
rm -rf "$tmp"
echo "headers in $OUT/gloo; now add $OUT/gloo/config.h (values: docs/distributed.md, "Gloo headers")"
