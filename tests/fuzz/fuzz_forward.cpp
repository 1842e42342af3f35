// The whole `kvec run` path in process, from a mutated model file: load, tokenizer, a session of
// at most 48 positions, a short greedy generation (with an eviction policy on alternate inputs).
// Non-finite weights must end in kvec::Error, never in a silent NaN stream.
#include "engine/generator.h"
#include "fuzz_common.h"
#include "model/model.h"
#include "model/session.h"
#include "policy/registry.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    // Bounded work: a model larger than the seeds' kind is refused before any forward pass.
    if (size > (1u << 20)) return 0;
    const std::string& path = kvec::fuzz::as_file(data, size);
    try {
        auto model = kvec::Model::load(path, kvec::LoadMode::Copy);
        const kvec::ModelConfig& c = model->config();
        if (int64_t{c.n_layer} * c.n_embd * c.n_ff > (int64_t{1} << 22) || c.n_vocab > 4096) return 0;
        const kvec::Tokenizer tok = kvec::Tokenizer::from_gguf(model->file());
        kvec::SessionOptions so;
        so.n_ctx = 48;
        so.n_batch = 8;
        kvec::Session session(*model, so);
        std::unique_ptr<kvec::Evictor> ev;
        if (size % 2 == 1) {
            ev = kvec::policy::make_policy("snapkv:budget=8,window=4,decode=1");
            session.set_evictor(ev.get());
        }
        kvec::Generator gen(session, tok);
        kvec::GenerateOptions o;
        o.prompt = "Once upon a time, in a land far away,";
        o.n_predict = size % 3 == 0 ? -1 : 4;
        o.sampling.temperature = 0.0f;
        const kvec::GenerationResult r = gen.generate(o);
        volatile size_t sink = r.text.size();
        (void)sink;
    } catch (const kvec::Error&) {
    }
    return 0;
}
