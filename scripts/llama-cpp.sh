# shellcheck shell=bash disable=SC2034,SC2154  # sourced: root comes from the caller, llama_cpp_bin is for it
# llama.cpp beside kvec: the source and the build that scripts/bench-vs-llama-cpp.sh and
# scripts/parity-vs-llama-cpp.sh share. Sourced (by bash), after `root` is set to the source tree.
#
# The source is the llama.cpp that the npm package node-llama-cpp ships (a git bundle of
# ggml-org/llama.cpp, MIT licence; nothing of it is committed here), fetched once into
# build/llama.cpp/src; it builds into build/llama.cpp/build with GGML_NATIVE (the kernels for this
# CPU) less AMX (see llama_cpp_build). Needs npm (installed by scripts/install-deps.sh), cmake, ninja and a C++ compiler; the
# first build takes about 8 minutes on 2 cores, later ones only build what is missing.

#
# LLAMA_CPP_QUICK=1 (.ci/run's oracle): a second build at -O1 in build/llama.cpp/build-quick, the
# same source and the same arithmetic (no fast-math at either level; ggml's kernels are
# intrinsics) in a fraction of the compile time (the library, llama-quantize and
# llama-perplexity: 2 min 8 s on 2 cores against well over 10 min at -O3). Never for speed.

# LLAMA_CPP_AVX2=1 (the benchmark scripts' --isa avx2, llama_cpp_isa): a build in build/llama.cpp/build-avx2
# for AVX2 + FMA + F16C + BMI2 only (no -march=native, no AVX-512 or AVX-VNNI), the instruction sets
# of an AVX2-only host such as Zen 2/3, to set beside kvec's AVX2 kernels (KVEC_AVX512=0) on an
# AVX-512 machine.

NODE_LLAMA_CPP_VERSION=3.22.1  # ships llama.cpp commit de3ff81 (2026-09-28)
llama_cpp="$root/build/llama.cpp"

# llama_cpp_select: the build (directory and options) that LLAMA_CPP_QUICK / LLAMA_CPP_AVX2 name.
llama_cpp_select() {
    llama_cpp_build_dir="$llama_cpp/build"
    llama_cpp_opt=(-DGGML_NATIVE=ON)
    if [ "${LLAMA_CPP_QUICK:-0}" = 1 ]; then
        llama_cpp_build_dir="$llama_cpp/build-quick"
        llama_cpp_opt+=(-DCMAKE_C_FLAGS_RELEASE="-O1 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG")
    elif [ "${LLAMA_CPP_AVX2:-0}" = 1 ]; then
        llama_cpp_build_dir="$llama_cpp/build-avx2"
        llama_cpp_opt=(-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
            -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF)
    fi
    llama_cpp_bin="$llama_cpp_build_dir/bin"
}
llama_cpp_select

# llama_cpp_isa ISA (the benchmark scripts' --isa): native, each engine with every instruction set
# this CPU has; or avx2, both limited to AVX2 + FMA + F16C: the AVX2 build of llama.cpp, and
# kvec_env=(KVEC_AVX512=0) for the caller to put before kvec's runs.
llama_cpp_isa() {
    kvec_env=()
    case "$1" in
        native) ;;
        avx2) LLAMA_CPP_AVX2=1; kvec_env=(KVEC_AVX512=0); llama_cpp_select ;;
        *) echo "error: --isa takes native or avx2, got '$1'" >&2; exit 2 ;;
    esac
}

# llama_cpp_build TARGET...: builds llama.cpp's TARGETs (llama-bench, llama-quantize,
# llama-perplexity, llama for the library), fetching the source and configuring the build first if
# that has not been done. Logs: build/llama.cpp/{configure,build}.log.
llama_cpp_build() {
    mkdir -p "$llama_cpp"
    if [ ! -d "$llama_cpp/src" ]; then
        echo "fetching node-llama-cpp@$NODE_LLAMA_CPP_VERSION (llama.cpp source) from npm" >&2
        (cd "$llama_cpp" && npm pack --silent "node-llama-cpp@$NODE_LLAMA_CPP_VERSION" > /dev/null)
        tar -xzf "$llama_cpp/node-llama-cpp-$NODE_LLAMA_CPP_VERSION.tgz" -C "$llama_cpp" package/llama/gitRelease.bundle
        git -c advice.detachedHead=false clone --quiet "$llama_cpp/package/llama/gitRelease.bundle" "$llama_cpp/src"
        rm -rf "$llama_cpp/package" "$llama_cpp/node-llama-cpp-$NODE_LLAMA_CPP_VERSION.tgz"
    fi
    if [ ! -f "$llama_cpp_build_dir/build.ninja" ]; then
        # -march=native without AMX: ggml's AMX kernels die with SIGILL where the hypervisor lists
        # AMX but does not grant its tile state (seen on this project's Sapphire-Rapids-class VMs),
        # and kvec has no AMX kernels either, so both engines run the same instruction sets.
        cmake -S "$llama_cpp/src" -B "$llama_cpp_build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${llama_cpp_opt[@]}" \
            -DCMAKE_C_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" -DCMAKE_CXX_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" \
            -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
            -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF > "$llama_cpp/configure.log"
    fi
    echo "building llama.cpp: $*" >&2
    cmake --build "$llama_cpp_build_dir" --target "$@" -j"$(nproc)" > "$llama_cpp/build.log"
}

# llama_cpp_perplexity MODEL TEXT CTX THREADS [LOG]: llama-perplexity's final estimate on TEXT with
# context CTX, printed as a number. llama.cpp logs from a worker thread, and on a loaded machine
# the last lines (the final estimate, even the last chunk's running value) can be lost at exit
# (seen in ctest at load 7), so it gets three tries. Prints nothing if all three lose it.
llama_cpp_perplexity() {
    local out ppl="" _
    for _ in 1 2 3; do
        out="$("$llama_cpp_bin/llama-perplexity" -m "$1" -f "$2" -c "$3" -t "$4" 2>&1)" || true
        [ -z "${5:-}" ] || printf '%s\n' "$out" >> "$5"
        ppl="$(sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p' <<< "$out")"
        [ -z "$ppl" ] || break
    done
    printf '%s' "$ppl"
}
