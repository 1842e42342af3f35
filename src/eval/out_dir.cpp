#include "eval/out_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "eval/jsonl.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/terminal.h"

namespace kvec::eval {

namespace fs = std::filesystem;

std::string lock_holder_description() {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
    const std::time_t t = std::time(nullptr);
    char when[32];
    std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
    return fmt::format("pid {} on host {}, started {}", ::getpid(), host, when);
}

DirLock::DirLock(const std::string& dir) {
    const std::string path = dir + "/.kvec-eval.lock";
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot open the lock file '{}': {}", path, std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
        const int err = errno;
        std::string holder;
        char buf[512];
        const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
        if (n > 0) holder.assign(buf, static_cast<size_t>(n));
        while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
        ::close(fd_);
        fd_ = -1;
        if (err == EWOULDBLOCK) {
            fail("output directory '{}' is in use by another kvec eval ({}); wait for it to finish or use "
                 "another --out", dir, holder.empty() ? std::string("holder unknown") : escape_control(holder));
        }
        fail("cannot lock '{}': {}", path, std::strerror(err));
    }
    const std::string me = lock_holder_description() + "\n";
    if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
        // The lock holds without the description; a second run then says "holder unknown".
    }
}

DirLock::~DirLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
}

RecordAppender::RecordAppender(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot open '{}' for appending: {}", path, std::strerror(errno));
}

RecordAppender::~RecordAppender() {
    if (fd_ >= 0) ::close(fd_);
}

void RecordAppender::append(const std::string& line) {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fail("cannot stat '{}': {}", path_, std::strerror(errno));
    std::string text = line;
    text += '\n';
    const ssize_t w = ::write(fd_, text.data(), text.size());
    if (w == static_cast<ssize_t>(text.size())) return;
    const int err = w < 0 ? errno : ENOSPC;  // a short write: the disk (or the file size limit) is full
    // Cut the partial record so that the file ends with a whole record.
    const bool cut = ::ftruncate(fd_, st.st_size) == 0;
    fail("cannot write a prediction to '{}': {}{}", path_, std::strerror(err),
         cut ? "; the predictions written before are intact: run the same command again to resume"
             : "; its last line may be incomplete and is dropped when the same command runs again");
}

void open_run_dir(const std::string& out_dir, const nlohmann::ordered_json& run, bool overwrite) {
    std::error_code ec;
    const std::string config_path = out_dir + "/config.json";
    const std::string pred_path = out_dir + "/predictions.jsonl";
    const std::string invocations_dir = out_dir + "/invocations";
    auto discard = [&] {
        fs::remove(pred_path, ec);
        fs::remove_all(invocations_dir, ec);
    };
    if (fs::exists(config_path)) {
        std::ifstream in(config_path);
        nlohmann::json old;
        bool readable = true;
        try {
            old = nlohmann::json::parse(in);
        } catch (const nlohmann::json::exception& e) {
            readable = false;
            fmt::print(stderr, "note: '{}' is not valid JSON ({}); it is written again for this run, and the "
                       "predictions in '{}' are kept\n", config_path, e.what(), pred_path);
        }
        const bool same = !readable || (old.contains("run") && old["run"] == nlohmann::json(run));
        if (!same && !overwrite) {
            fail("'{}' holds a different run (model, data, policies, budgets or options differ); use another --out, "
                 "or --overwrite to discard it", out_dir);
        }
        if (!same || overwrite) discard();
        // Runs made before the cost files kept their totals in metrics.json: carry them over once.
        if (same && !overwrite && !fs::exists(invocations_dir) && fs::exists(out_dir + "/metrics.json")) {
            try {
                std::ifstream min(out_dir + "/metrics.json");
                const nlohmann::json m = nlohmann::json::parse(min);
                if (m.contains("total") && m["total"].is_object()) {
                    fs::create_directories(invocations_dir, ec);
                    write_file_atomic(invocations_dir + "/earlier.json", m["total"].dump(2) + "\n");
                }
            } catch (const nlohmann::json::exception&) {
            }
        }
    } else if (overwrite) {
        discard();
    }
    fs::create_directories(invocations_dir, ec);
    if (ec) fail("cannot create '{}': {}", invocations_dir, ec.message());
}

std::vector<EvalRecord> load_predictions(const std::string& path) {
    std::vector<EvalRecord> out;
    if (!fs::exists(path)) return out;
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("cannot read '{}'", path);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    std::string kept, damaged;
    size_t pos = 0, line = 0, bad = 0, repeated = 0;
    bool torn = false;
    std::set<RecordKey> keys;
    while (pos < text.size()) {
        const size_t nl = text.find('\n', pos);
        ++line;
        if (nl == std::string::npos) {  // no newline: a torn last write
            torn = true;
            break;
        }
        const std::string body = text.substr(pos, nl - pos);
        pos = nl + 1;
        if (body.empty()) continue;
        const std::string where = fmt::format("{}:{}", path, line);
        try {
            const auto j = parse_jsonl_line(body, where);
            if (!j) continue;
            EvalRecord r = record_from_json(*j, where);
            if (!keys.insert({r.id, r.policy, r.budget}).second) {
                ++repeated;
                continue;
            }
            out.push_back(std::move(r));
            kept += body + "\n";
        } catch (const Error& e) {
            ++bad;
            damaged += body + "\n";
            fmt::print(stderr, "note: {}\n", escape_control(e.what()));
        }
    }
    if (torn) fmt::print(stderr, "note: dropping an incomplete last line of {} (interrupted write)\n", path);
    if (bad > 0) {
        std::ofstream(path + ".damaged", std::ios::binary | std::ios::app) << damaged;
        fmt::print(stderr, "note: {} damaged line(s) of {} moved to {}.damaged; their samples run again\n", bad,
                   path, path);
    }
    if (repeated > 0) fmt::print(stderr, "note: {} repeated record(s) of {} dropped\n", repeated, path);
    if (torn || bad > 0 || repeated > 0) write_file_atomic(path, kept);
    return out;
}


namespace {
std::string now_compact() {
    const std::time_t t = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", std::gmtime(&t));
    return buf;
}
}  // namespace

InvocationCosts::InvocationCosts(const std::string& out_dir)
    : dir_(out_dir + "/invocations"), mine_(dir_ + "/" + fmt::format("{}-{}.json", now_compact(), ::getpid())) {}

void InvocationCosts::record(const SweepStats& st) const {
    nlohmann::ordered_json j = {{"wall_seconds", st.wall_seconds},     {"prefill_seconds", st.prefill_seconds},
                                {"replay_seconds", st.replay_seconds}, {"decode_seconds", st.decode_seconds},
                                {"prefills", st.prefills},             {"generations", st.generations}};
    write_file_atomic(mine_, j.dump(2) + "\n");
}

nlohmann::json InvocationCosts::totals() const {
    nlohmann::json sum = nlohmann::json::object();
    int64_t n = 0;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir_, ec)) {
        if (e.path().extension() != ".json") continue;
        try {
            std::ifstream in(e.path());
            const nlohmann::json j = nlohmann::json::parse(in);
            for (const auto& [k, v] : j.items()) {
                if (v.is_number()) sum[k] = sum.value(k, 0.0) + v.get<double>();
            }
            n += j.value("invocations", int64_t{1});
        } catch (const nlohmann::json::exception&) {
            fmt::print(stderr, "note: ignoring the unreadable cost file {}\n", e.path().string());
        }
    }
    sum["invocations"] = n;
    return sum;
}

}  // namespace kvec::eval
