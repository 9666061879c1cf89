#!/usr/bin/env bash
# Installs what eagle-train needs to build and test: Debian packages, and LibTorch from the PyPI
# torch wheel in a virtual environment outside the repo (reused by later runs and CI).
# Idempotent: quick when everything is already there. Prints what it installed and what it found.
set -euo pipefail

TORCH_VERSION="${EAGLE_TORCH_VERSION:-2.11.0}"
DEPS_DIR="${EAGLE_DEPS_DIR:-$HOME/.cache/eagle-train}"
VENV="$DEPS_DIR/venv"
# Python packages for the reference-fixture and demo scripts and the TensorBoard read-back test.
PY_EXTRAS=("transformers==5.23.0" "tokenizers" "tensorboard==2.21.0" "numpy" "safetensors")
APT_PACKAGES=(cmake ninja-build g++ ccache libcli11-dev nlohmann-json3-dev libspdlog-dev catch2
              libsimdjson-dev zlib1g-dev python3-venv python3-pip)

installed=()
present=()

# --- Debian packages ---
missing=()
for p in "${APT_PACKAGES[@]}"; do
  if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    present+=("$p")
  elif [[ "$p" == python3-* ]] && command -v python3 >/dev/null && python3 -m venv --help >/dev/null 2>&1 &&
       python3 -m pip --version >/dev/null 2>&1; then
    present+=("$p (python3 found)")
  else
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  echo "[setup] installing Debian packages: ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
  installed+=("${missing[@]}")
fi

# --- LibTorch from the PyPI torch wheel ---
mkdir -p "$DEPS_DIR"
if [[ ! -x "$VENV/bin/python" ]]; then
  echo "[setup] creating the Python environment $VENV"
  python3 -m venv "$VENV"
  installed+=("venv $VENV")
fi
PY="$VENV/bin/python"
have_torch=$("$PY" - "$TORCH_VERSION" <<'PYEOF' 2>/dev/null || true
import sys, importlib.metadata as md
try:
    v = md.version("torch")
except md.PackageNotFoundError:
    sys.exit(0)
print(v)
PYEOF
)
if [[ "$have_torch" != "$TORCH_VERSION"* ]]; then
  echo "[setup] installing torch==$TORCH_VERSION from PyPI (a CUDA 13.0 build, several GB: this takes a few minutes)"
  if ! "$VENV/bin/pip" install --progress-bar on "torch==$TORCH_VERSION"; then
    echo "[setup] ERROR: pip could not install torch==$TORCH_VERSION from the package registry." >&2
    echo "[setup] versions the registry serves: $("$VENV/bin/pip" index versions torch 2>/dev/null | head -2 | tail -1)" >&2
    echo "[setup] set EAGLE_TORCH_VERSION to one of them built for CUDA 13, or check the network." >&2
    exit 1
  fi
  installed+=("torch==$TORCH_VERSION")
else
  present+=("torch $have_torch")
fi
missing_py=()
for spec in "${PY_EXTRAS[@]}"; do
  name="${spec%%==*}"
  want="${spec#*==}"; [[ "$want" == "$spec" ]] && want=""
  got=$("$PY" -c "import importlib.metadata as m; print(m.version('$name'))" 2>/dev/null || true)
  if [[ -z "$got" || ( -n "$want" && "$got" != "$want" ) ]]; then missing_py+=("$spec"); else present+=("$name $got"); fi
done
if ((${#missing_py[@]})); then
  echo "[setup] installing Python packages: ${missing_py[*]}"
  "$VENV/bin/pip" install -q "${missing_py[@]}"
  installed+=("${missing_py[@]}")
fi

TORCH_CMAKE=$("$PY" -c "import torch.utils; print(torch.utils.cmake_prefix_path)" 2>/dev/null)
cat > "$DEPS_DIR/env.sh" <<ENVEOF
# Written by scripts/setup.sh
export EAGLE_PYTHON="$PY"
export EAGLE_TORCH_CMAKE_PREFIX="$TORCH_CMAKE"
ENVEOF

echo "[setup] already present: ${present[*]:-nothing}"
echo "[setup] installed now: ${installed[*]:-nothing}"
echo "[setup] LibTorch CMake prefix: $TORCH_CMAKE"
