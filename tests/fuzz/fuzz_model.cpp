// Model hyper-parameters and tensor binding (read_model_config, Model), and the tokenizer a model
// file carries (Tokenizer::from_gguf): any GGUF file loads or throws kvec::Error.
#include "engine/generator.h"
#include "fuzz_common.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string& path = kvec::fuzz::as_file(data, size);
    try {
        auto model = kvec::Model::load(path, kvec::LoadMode::Map);
        volatile int64_t sink = model->n_params() + static_cast<int64_t>(model->summary().size());
        (void)sink;
        const kvec::Tokenizer tok = kvec::Tokenizer::from_gguf(model->file());
        kvec::check_tokenizer_fits(tok, model->config().n_vocab);
    } catch (const kvec::Error&) {
    }
    try {
        auto file = kvec::gguf::File::open(path, kvec::LoadMode::Map);
        const kvec::Tokenizer tok = kvec::Tokenizer::from_gguf(*file);
        const std::vector<int32_t> ids = tok.encode("Hello, world! <s> 123", true, true);
        volatile size_t sink = tok.decode(ids).size();
        (void)sink;
    } catch (const kvec::Error&) {
    }
    return 0;
}
