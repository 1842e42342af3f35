#include "engine/step_scheduler.h"

#include <algorithm>

#include "util/threads.h"

namespace kvec {

StepScheduler::StepScheduler(std::chrono::microseconds gather_wait)
    : gather_wait_(gather_wait), engine_(&StepScheduler::engine, this, num_threads()) {}

StepScheduler::~StepScheduler() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    work_.notify_all();
    engine_.join();
}

std::span<const float> StepScheduler::decode(Session& session, int32_t token) {
    session.check_decode(token);  // this session's own errors stay its own
    Decode d{&session, token, Clock::now(), false, nullptr};
    std::unique_lock<std::mutex> lock(mutex_);
    waiting_.push_back(&d);
    work_.notify_all();
    done_.wait(lock, [&] { return d.done; });
    if (d.error) std::rethrow_exception(d.error);
    return session.last_logits();
}

void StepScheduler::run_exclusive(const std::function<void()>& step) {
    Exclusive e{&step, false, nullptr};
    std::unique_lock<std::mutex> lock(mutex_);
    exclusive_.push_back(&e);
    work_.notify_all();
    done_.wait(lock, [&] { return e.done; });
    if (e.error) std::rethrow_exception(e.error);
}

void StepScheduler::engine(int threads) {
    set_num_threads(threads);  // OpenMP's thread count is per thread: the constructing thread's
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
        work_.wait(lock, [&] { return stop_ || !waiting_.empty() || !exclusive_.empty(); });
        if (stop_) return;
        if (!exclusive_.empty() && (waiting_.empty() || !decodes_first_)) {
            run_exclusive_step(lock);
            continue;
        }
        // Decode steps: wait for the other decoding generations (they are sampling) a little.
        const Clock::time_point deadline = waiting_.front()->arrived + gather_wait_;
        work_.wait_until(lock, deadline, [&] { return stop_ || waiting_.size() >= static_cast<size_t>(decoding_); });
        if (stop_) return;
        run_batch(lock);
    }
}

void StepScheduler::run_batch(std::unique_lock<std::mutex>& lock) {
    const auto cap = static_cast<size_t>(waiting_.front()->session->options().n_batch);
    const auto n = static_cast<std::ptrdiff_t>(std::min(cap, waiting_.size()));
    const std::vector<Decode*> batch(waiting_.begin(), waiting_.begin() + n);
    waiting_.erase(waiting_.begin(), waiting_.begin() + n);
    lock.unlock();
    std::vector<Session*> sessions;  // [B]
    std::vector<int32_t> tokens;     // [B]
    for (const Decode* d : batch) {
        sessions.push_back(d->session);
        tokens.push_back(d->token);
    }
    std::exception_ptr error;
    try {
        Session::decode_batch(sessions, tokens);
    } catch (...) {
        error = std::current_exception();
    }
    lock.lock();
    for (Decode* d : batch) {
        d->done = true;
        d->error = error;
    }
    decodes_first_ = false;
    ++stats_.batches;
    stats_.sequences += n;
    stats_.largest = std::max<int64_t>(stats_.largest, n);
    done_.notify_all();
}

void StepScheduler::run_exclusive_step(std::unique_lock<std::mutex>& lock) {
    Exclusive* e = exclusive_.front();
    exclusive_.pop_front();
    lock.unlock();
    std::exception_ptr error;
    try {
        (*e->step)();
    } catch (...) {
        error = std::current_exception();
    }
    lock.lock();
    e->done = true;
    e->error = error;
    decodes_first_ = true;
    ++stats_.exclusive;
    done_.notify_all();
}

StepScheduler::Decoding::Decoding(StepScheduler& s) : s_(s) {
    std::lock_guard<std::mutex> lock(s_.mutex_);
    ++s_.decoding_;
}

StepScheduler::Decoding::~Decoding() {
    std::lock_guard<std::mutex> lock(s_.mutex_);
    --s_.decoding_;
    s_.work_.notify_all();  // a gathering batch stops waiting for this generation
}

StepScheduler::Stats StepScheduler::stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
}

}  // namespace kvec
