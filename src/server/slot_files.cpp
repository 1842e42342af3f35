// POST /slots/{id}?action=save|restore|erase: a slot's kept conversation (its compressed cache,
// positions, tokens and policy) written to a file in --slot-save-path, read back into a free slot,
// or dropped. File names are plain names inside that directory: no separators, no "..", no
// leading dot, nothing but regular files (docs/server.md). A save writes a temporary file beside the
// destination and renames it (util/atomic_file.h); the server removes the temporaries of saves
// killed before their rename when it starts.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>

#include "engine/session_file.h"
#include "policy/registry.h"
#include "server/api_error.h"
#include "server/request.h"
#include "server/server.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/sha256.h"
#include "util/timer.h"

namespace kvec::server {

using nlohmann::json;

namespace {

// The request's "filename", checked to name a file directly inside dir (ApiError 400 otherwise).
std::string slot_file_name(const std::string& body) {
    const json b = parse_json_body(body, " (send {\"filename\": \"NAME\"})");
    if (!b.is_object() || !b.contains("filename") || !b["filename"].is_string()) {
        bad_request("invalid_filename", "the request body needs a string field 'filename'");
    }
    const std::string name = b["filename"].get<std::string>();
    const bool plain = std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
               c == '-';
    });
    if (name.empty() || name.size() > 200 || !plain || name.front() == '.') {
        bad_request("invalid_filename",
                    "'filename' must be a plain file name of 1 to 200 letters, digits, '.', '_' or '-', not starting "
                    "with '.' (no directories)");
    }
    return name;
}

// The largest slot file a session of this server can have written: every position of the
// context in every (layer, KV head), with room for 16 policy scores an entry, its tokens, and 1 MiB
// of header (policy text, hashes). A restore refuses a larger file before reading it.
uint64_t max_slot_file_bytes(const Session& session) {
    const KvCache& kv = session.kv_cache();
    const auto ctx = static_cast<uint64_t>(session.n_ctx());
    return ctx * static_cast<uint64_t>(kv.n_layer()) * static_cast<uint64_t>(kv.n_head_kv()) * (kv.entry_bytes() + 64) +
           4 * ctx + (uint64_t{1} << 20);
}

// A kvec::Error's message with the save directory left out (error bodies name no paths).
std::string without_dir(std::string message, const std::string& dir) {
    for (size_t at = message.find(dir); at != std::string::npos; at = message.find(dir)) message.erase(at, dir.size() + 1);
    return message;
}

}  // namespace

const std::string& Server::model_sha256() {
    std::call_once(model_sha256_once_, [this] { model_sha256_ = sha256_file(model_.path()); });
    return model_sha256_;
}

void Server::slot_action(const http::Request& req, http::Response& res) {
    const std::string& id_text = req.matches[1];
    int id = -1;
    const auto [end, ec] = std::from_chars(id_text.data(), id_text.data() + id_text.size(), id);
    if (ec != std::errc() || end != id_text.data() + id_text.size() || id >= slots_->size()) {
        throw ApiError(404, "invalid_request_error", "slot_not_found",
                       fmt::format("slot {} does not exist (the server has slots 0 to {})", id_text, slots_->size() - 1));
    }
    const std::string action = req.param("action");
    if (action != "save" && action != "restore" && action != "erase") {
        bad_request("invalid_action", "'action' must be save, restore or erase, got '{}'", action);
    }
    std::string name, path;
    if (action != "erase") {
        if (options_.slot_save_path.empty()) {
            throw ApiError(501, "not_supported_error", "slot_save_disabled",
                           "saving and restoring slots is off: start the server with --slot-save-path DIR");
        }
        name = slot_file_name(req.body);
        path = options_.slot_save_path + "/" + name;
        try {
            check_replaceable(path);  // absent, or a regular file: never through a link, never a device
        } catch (const Error&) {
            bad_request("invalid_filename", "'{}' is not a regular file (a symbolic link, directory, device or FIFO): "
                        "refused", name);
        }
        if (action == "restore" && !std::filesystem::is_regular_file(path)) {
            throw ApiError(404, "invalid_request_error", "file_not_found", fmt::format("no saved slot file '{}'", name));
        }
    }
    std::optional<SlotLease> lease = slots_->try_acquire(id);
    if (!lease) {
        throw ApiError(409, "invalid_request_error", "slot_busy", fmt::format("slot {} is serving a request; try again", id));
    }
    Slot& slot = lease->slot();
    Session& session = *slot.session;
    Timer timer;
    json body = {{"id_slot", id}};
    if (action == "erase") {
        body["n_erased"] = slot.kept ? session.n_past() : 0;
        slot.kept.reset();  // the lease's release empties the cache
    } else if (action == "save") {
        if (!slot.kept) {
            bad_request("nothing_to_save",
                        "slot {} keeps no conversation: send requests with \"kv\": {{\"reuse\": true}} (or start the "
                        "server with --kv-reuse)", id);
        }
        try {
            save_session(session, path, model_sha256(), slot.kept->spec);
        } catch (const Error& e) {
            std::fprintf(stderr, "kvec serve: slot save failed: %s\n", e.what());
            throw ApiError(500, "server_error", "save_failed", fmt::format("cannot write '{}'", name));
        }
        body["filename"] = name;
        body["n_saved"] = session.n_past();
        body["n_written"] = std::filesystem::file_size(path);
        body["timings"] = {{"save_ms", timer.seconds() * 1e3}};
    } else {
        slot.kept.reset();
        session.reset();
        session.set_evictor(nullptr);
        try {
            const SessionFile file = SessionFile::read(path, max_slot_file_bytes(session));
            if (file.model_sha256() != model_sha256()) {
                bad_request("wrong_model", "'{}' was saved with another model (sha256 {}), this server runs {}", name,
                            file.model_sha256().substr(0, 16), model_sha256().substr(0, 16));
            }
            std::shared_ptr<Evictor> policy;
            if (!file.policy().empty()) policy = policy::make_policy(file.policy());
            session.set_evictor(policy.get());
            file.restore(session);
            const size_t bytes = session.kv_cache().bytes();
            if (!slots_->make_room_for_kept(slot, bytes)) {
                session.reset();
                session.set_evictor(nullptr);
                if (bytes > slots_->kv_memory()) {
                    bad_request("kv_memory_exceeded", "'{}' holds {} bytes of KV cache, more than the server's "
                                "--kv-memory of {} bytes", name, bytes, slots_->kv_memory());
                }
                throw ApiError(503, "server_error", "server_busy",
                               fmt::format("'{}' holds {} bytes of KV cache, more than the running requests leave "
                                           "free under --kv-memory; try again", name, bytes))
                    .retry_after(std::max(1, options_.queue_timeout_s / 4));
            }
            slot.kept = Slot::Kept{file.policy(), policy};
            body["filename"] = name;
            body["n_restored"] = session.n_past();
            body["n_read"] = std::filesystem::file_size(path);
            body["kv"] = {{"policy", file.policy().empty() ? "none" : file.policy()},
                          {"entries", session.kv_cache().total_entries()},
                          {"bytes", session.kv_cache().bytes()}};
        } catch (const Error& e) {
            session.reset();
            bad_request("invalid_slot_file", "cannot restore '{}': {}", name, without_dir(e.what(), options_.slot_save_path));
        }
        body["timings"] = {{"restore_ms", timer.seconds() * 1e3}};
    }
    slot.publish_kv_bytes();
    res.set_content(body.dump(), "application/json");
}

}  // namespace kvec::server
