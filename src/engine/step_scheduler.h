// Forward steps of several generations sharing one machine (kvec serve's slots): continuous
// batching. Each generation runs on its own thread, but every forward step runs on the
// scheduler's engine thread (one OpenMP team, so that thread teams do not fight over the cores):
// the decode steps that wait together run as one batched step (Session::decode_batch: every
// weight matrix read once for all of them, attention per sequence over its own cache), and
// prefill chunks take turns with those batches one chunk at a time, so a long prompt arriving
// does not stall the running conversations and a new conversation does not wait for theirs to
// end.
//
//   generation threads                 engine thread (one step at a time)
//   ----------------------------       ------------------------------------------------
//   decode(s1, t1) ─┐
//   decode(s2, t2) ─┼── wait ────────▶ decode_batch({s1, s2, s3}, {t1, t2, t3})
//   decode(s3, t3) ─┘
//   s4's prefill chunk ── wait ──────▶ the chunk's forward step (Session::set_step_gate)
//
// Turns: after a prefill chunk the waiting decode steps go first; after a decode batch the oldest
// waiting prefill chunk goes first (prefill chunks first come, first served). Decode steps that
// arrive while others are still sampling their next token wait up to gather_wait (from the first
// one's arrival) for every decoding generation to queue its step, then run with whoever is there.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "model/session.h"

namespace kvec {

class StepScheduler {
public:
    // Starts the engine thread, with the calling thread's OpenMP thread count.
    explicit StepScheduler(std::chrono::microseconds gather_wait = std::chrono::milliseconds(2));
    // Stops the engine thread; no step may be waiting (every generation has ended).
    ~StepScheduler();
    StepScheduler(const StepScheduler&) = delete;
    StepScheduler& operator=(const StepScheduler&) = delete;

    // One decode step of `session` (as Session::decode); blocks until the batch that holds it
    // has run. kvec::Error as Session::decode, for this session only (its token and position are
    // checked before it joins a batch); an error of the batched step reaches every session in it.
    std::span<const float> decode(Session& session, int32_t token);

    // Runs one prefill step (a chunk, a reconstruction pass) on the engine thread, alone, between
    // decode batches; blocks until it has run and rethrows its exception. The Session::StepGate
    // of a generation under this scheduler.
    void run_exclusive(const std::function<void()>& step);

    // A generation in its decode phase (between its prefill and its end): decode steps wait for
    // each other only while some are decoding. RAII.
    class Decoding {
    public:
        explicit Decoding(StepScheduler& s);
        ~Decoding();
        Decoding(const Decoding&) = delete;
        Decoding& operator=(const Decoding&) = delete;

    private:
        StepScheduler& s_;
    };

    struct Stats {
        int64_t batches = 0;    // decode batches run
        int64_t sequences = 0;  // decode steps run in them (sum of batch sizes)
        int64_t largest = 0;    // largest batch
        int64_t exclusive = 0;  // prefill steps run
    };
    Stats stats() const;

private:
    using Clock = std::chrono::steady_clock;
    struct Decode {
        Session* session;
        int32_t token;
        Clock::time_point arrived;
        bool done = false;
        std::exception_ptr error;
    };
    struct Exclusive {
        const std::function<void()>* step;
        bool done = false;
        std::exception_ptr error;
    };
    void engine(int threads);
    void run_batch(std::unique_lock<std::mutex>& lock);      // under mutex_: runs waiting_'s first steps
    void run_exclusive_step(std::unique_lock<std::mutex>& lock);  // ... exclusive_'s first

    const std::chrono::microseconds gather_wait_;
    mutable std::mutex mutex_;
    std::condition_variable work_;  // the engine: steps arrived, a generation stopped decoding
    std::condition_variable done_;  // the generations: steps ran
    bool stop_ = false;
    bool decodes_first_ = false;      // a prefill step ran last: waiting decode steps go next
    int decoding_ = 0;                // generations in their decode phase (Decoding)
    std::vector<Decode*> waiting_;    // decode steps waiting for a batch, in arrival order
    std::deque<Exclusive*> exclusive_;  // prefill steps waiting, first come, first served
    Stats stats_;
    std::thread engine_;
};

}  // namespace kvec
