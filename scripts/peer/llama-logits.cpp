// llama-logits: the logits llama.cpp computes at every position of a token sequence, the peer's
// side of scripts/parity-vs-llama-cpp.sh (kvec's side is `kvec logits`).
//
//   llama-logits MODEL.gguf TOKENS.txt OUT.f32 [THREADS [TYPE_K TYPE_V]]
//
// TOKENS.txt holds token ids separated by white space, used exactly as given (no BOS is added).
// The sequence is evaluated on the CPU in one batch (one micro-batch) with llama.cpp's default
// context parameters otherwise (F16 KV cache, flash attention as llama.cpp chooses), and OUT.f32
// receives float32 [n_tokens, n_vocab], row i the logits after token i. TYPE_K and TYPE_V (ggml's
// names: f16, q8_0, q4_0, ...) set the KV cache's element types, with flash attention on (which
// llama.cpp needs for a quantised V cache). Built by the script against the library of
// build/llama.cpp (the source scripts/llama-cpp.sh fetches).
#include <llama.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

namespace {

int fail(const char* what) {
    std::fprintf(stderr, "llama-logits: %s\n", what);
    return 1;
}

// llama.cpp's log lines, errors and warnings only.
void log_errors(ggml_log_level level, const char* text, void*) {
    if (level == GGML_LOG_LEVEL_ERROR || level == GGML_LOG_LEVEL_WARN) std::fputs(text, stderr);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 4 && argc != 5 && argc != 7) {
        std::fprintf(stderr, "usage: llama-logits MODEL.gguf TOKENS.txt OUT.f32 [THREADS [TYPE_K TYPE_V]]\n");
        return 2;
    }
    const int threads = argc >= 5 ? std::atoi(argv[4]) : 2;
    ggml_type kv_types[2] = {GGML_TYPE_F16, GGML_TYPE_F16};
    for (int i = 0; argc == 7 && i < 2; ++i) {
        int t = 0;
        while (t < GGML_TYPE_COUNT && std::strcmp(ggml_type_name(static_cast<ggml_type>(t)), argv[5 + i]) != 0) ++t;
        if (t == GGML_TYPE_COUNT) return fail("unknown KV cache type (ggml's names: f16, q8_0, q4_0, ...)");
        kv_types[i] = static_cast<ggml_type>(t);
    }
    std::vector<llama_token> tokens;
    {
        std::ifstream in(argv[2]);
        if (!in) return fail("cannot read the token file");
        for (llama_token t; in >> t;) tokens.push_back(t);
        if (!in.eof()) return fail("the token file holds something other than token ids");
    }
    if (tokens.empty()) return fail("no tokens");
    const auto n = static_cast<int32_t>(tokens.size());

    llama_log_set(log_errors, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model* model = llama_model_load_from_file(argv[1], mp);
    if (!model) return fail("llama.cpp could not load the model");
    const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    for (llama_token t : tokens) {
        if (t < 0 || t >= n_vocab) return fail("token id outside the vocabulary");
    }

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = static_cast<uint32_t>(n);
    cp.n_batch = static_cast<uint32_t>(n);
    cp.n_ubatch = static_cast<uint32_t>(n);
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    cp.no_perf = true;
    if (argc == 7) {
        cp.type_k = kv_types[0];
        cp.type_v = kv_types[1];
        cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
    }
    llama_context* ctx = llama_init_from_model(model, cp);
    if (!ctx) return fail("llama.cpp could not create a context");

    llama_batch batch = llama_batch_init(n, 0, 1);
    for (int32_t i = 0; i < n; ++i) {
        batch.token[i] = tokens[i];
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = 1;
    }
    batch.n_tokens = n;
    if (llama_decode(ctx, batch) != 0) return fail("llama_decode failed");

    std::ofstream out(argv[3], std::ios::binary);
    for (int32_t i = 0; i < n; ++i) {
        out.write(reinterpret_cast<const char*>(llama_get_logits_ith(ctx, i)),
                  static_cast<std::streamsize>(sizeof(float)) * n_vocab);
    }
    if (!out.flush()) return fail("cannot write the output file");

    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    std::fprintf(stderr, "llama-logits: %d tokens x %d logits -> %s\n", n, n_vocab, argv[3]);
    return 0;
}
