# shellcheck shell=bash disable=SC2034  # sourced: root comes from the caller, peer_python is for it
# The peer virtual environment (kvpress, transformers, torch, gguf from PyPI, every package pinned
# by version and sha256 in scripts/peer/requirements.txt), shared by scripts/peer/hf-oracle.sh and
# scripts/peer/kvpress.sh. Sourced (by bash) after `root` is set to the source tree. Created once
# in build/peer-venv (KVEC_PEER_VENV=DIR: another place, e.g. one made before) with
# /usr/bin/python3 -m venv (Debian's python3-venv); about 3.0 GB downloaded and 5.9 GB on disk
# (torch's wheel brings the CUDA libraries it loads at import, even on a CPU). Not part of the
# README's test command or CI: too large for them.
peer_venv="${KVEC_PEER_VENV:-$root/build/peer-venv}"
peer_python="$peer_venv/bin/python"
peer_venv_ensure() {
    local stamp="$peer_venv/.kvec-requirements"
    if [ -x "$peer_python" ] && cmp -s "$root/scripts/peer/requirements.txt" "$stamp"; then return; fi
    if [ -n "${KVEC_PEER_VENV:-}" ] && [ -x "$peer_python" ]; then return; fi  # the caller's own
    echo "creating the peer virtual environment in $peer_venv (about 3 GB from PyPI)" >&2
    local start=$SECONDS
    /usr/bin/python3 -m venv "$peer_venv"
    "$peer_python" -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps \
        -r "$root/scripts/peer/requirements.txt"
    cp "$root/scripts/peer/requirements.txt" "$stamp"
    echo "peer virtual environment ready in $((SECONDS - start)) s ($(du -sh "$peer_venv" | cut -f1))" >&2
}
