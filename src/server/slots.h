// Slots: the --parallel N sessions of the server, each with its own KV cache. A request leases a
// free slot for its whole generation; requests beyond N wait in a first-come, first-served queue.
// A slot's cache is emptied (its memory freed) when the lease ends, whether the request finished,
// failed or its client went away, unless the request kept its conversation (kv.reuse): then the
// cache, its tokens and the policy that compressed it stay, and a later request with the same
// policy whose prompt starts with those tokens continues from them (only the rest is prefilled).
// Requests without reuse take an empty slot before one that keeps a conversation, and a kept
// conversation gives its slot up (least recently used first) when no empty slot is free. The KV
// bytes of each slot are published for /metrics as the generation proceeds (Slot::publish_kv_bytes
// from the generating thread).
//
// Memory admission (--kv-memory): a request reserves the KV bytes it may reach (kv_reservation in
// completion.h) before it takes a slot, and waits in the queue until the reservations of the
// running requests, the bytes of the conversations kept by idle slots and its own fit under the
// bound. Kept conversations give their memory up (least recently used first) before a request
// waits for it; a request that would not fit even in an empty server is refused at once, one that
// waits past its timeout gets SlotPool::Timeout (the server answers 503 with Retry-After).
//
// Generation is continuously batched (engine/step_scheduler.h): the decode steps of the slots
// that generate run as one forward step, and a new request's prefill chunks take turns with them.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/step_scheduler.h"
#include "model/model.h"
#include "model/session.h"

namespace kvec::server {

struct Slot {
    // A conversation the slot's session holds between requests (kv.reuse, or restored from a
    // file): the policy that compressed its cache stays attached to the session.
    struct Kept {
        std::string spec;                // canonical policy ("" = full cache)
        std::shared_ptr<Evictor> policy;  // nullptr with spec ""
    };

    int id = 0;
    std::unique_ptr<Session> session;
    std::atomic<size_t> kv_bytes{0};  // the session's cache allocation, as last published
    std::optional<Kept> kept;         // changed only by the slot's lease holder
    uint64_t last_used = 0;           // the pool's clock when the slot was last leased

    void publish_kv_bytes() { kv_bytes.store(session->kv_cache().bytes(), std::memory_order_relaxed); }
};

class SlotPool;

// A leased slot; returns it to the pool (cache emptied) when destroyed.
class SlotLease {
public:
    SlotLease(SlotPool& pool, Slot& slot, int32_t reuse = 0, size_t reserved = 0, size_t steady = 0)
        : pool_(&pool), slot_(&slot), reuse_(reuse), reserved_(reserved), steady_(steady) {}
    SlotLease(SlotLease&& other) noexcept
        : pool_(other.pool_), slot_(other.slot_), reuse_(other.reuse_), reserved_(other.reserved_),
          steady_(other.steady_) {
        other.slot_ = nullptr;
    }
    SlotLease(const SlotLease&) = delete;
    SlotLease& operator=(const SlotLease&) = delete;
    SlotLease& operator=(SlotLease&&) = delete;
    ~SlotLease();

    Slot& slot() const { return *slot_; }
    // Prompt tokens the slot's kept conversation already holds (GenerateOptions::reuse); 0: the
    // slot starts afresh.
    int32_t reuse() const { return reuse_; }
    size_t reserved() const { return reserved_; }  // KV bytes reserved under --kv-memory
    // Once the prompt is in (its eviction done), the reservation shrinks to the request's steady
    // bytes (SlotRequest::kv_steady_bytes) and waiting requests may use the rest.
    void settle();

private:
    SlotPool* pool_;
    Slot* slot_;
    int32_t reuse_ = 0;
    size_t reserved_ = 0;
    size_t steady_ = 0;
};

// What a request asks of the pool.
struct SlotRequest {
    std::span<const int32_t> prompt;          // to find a kept conversation it continues
    const std::string* reuse_spec = nullptr;  // its policy, when it continues one (kv.reuse)
    size_t kv_bytes = 0;                      // KV bytes to reserve (counted only under --kv-memory)
    size_t kv_steady_bytes = 0;               // what stays reserved after the prompt (SlotLease::settle)
    std::chrono::milliseconds timeout{0};     // how long it may wait in the queue (0: for ever)
    std::function<bool()> gone;               // its client went away (asked while it waits); null: never
    int slot = -1;                            // the slot it must run on (llama-server's id_slot; -1: any)
    // The reservation (peak, steady) when the slot picked continues `reuse` prompt tokens of its
    // kept conversation, which holds `kept_bytes`; null: kv_bytes and kv_steady_bytes always.
    std::function<std::pair<size_t, size_t>(int32_t reuse, size_t kept_bytes)> reserve_reused;
};

class SlotPool {
public:
    // Thrown by acquire() when the request waited for its timeout.
    struct Timeout : std::runtime_error {
        using std::runtime_error::runtime_error;
    };
    // Thrown by acquire() when request.gone() said the client went away while it waited.
    struct Gone : std::runtime_error {
        using std::runtime_error::runtime_error;
    };

    // n slots of sessions on `model` (kvec::Error for n < 1); kv_memory bounds the KV bytes of all
    // slots together (0: no bound).
    SlotPool(const Model& model, const SessionOptions& options, int n, size_t kv_memory = 0);

    // Waits for a free slot (first come, first served) and leases it. With a policy spec (the
    // request wants its conversation reused), the free slot keeping a conversation of that policy
    // that shares the longest token prefix with the prompt is taken, and the lease's reuse() says
    // how many prompt tokens it holds (at most all but the last, whose logits are needed).
    // Otherwise an empty slot, else the least recently used one keeping a conversation. A request
    // naming its slot (request.slot) takes that one (reusing its conversation as above), waiting
    // while it is busy; requests behind it in the queue wait too (first come, first served).
    // Under --kv-memory it also waits until request.kv_bytes fit (see above); kvec::Error when they
    // exceed the bound by themselves or the named slot does not exist, Timeout after request.timeout,
    // Gone when request.gone() turns true (asked every 100 ms while it waits); either way the
    // request leaves the queue and those behind it move up.
    SlotLease acquire(const SlotRequest& request = {});
    // Leases slot `id` if it is free now (slot save / restore / erase); nullopt if it is busy.
    // kvec::Error for an id that is not a slot.
    std::optional<SlotLease> try_acquire(int id);
    // Under --kv-memory, whether `bytes` (a conversation restored into the leased `slot`, to be
    // kept) fit beside the running requests' reservations and the other kept conversations, once
    // kept conversations of idle slots are dropped (least recently used first) to make room.
    bool make_room_for_kept(const Slot& slot, size_t bytes);

    int size() const { return static_cast<int>(slots_.size()); }
    int busy() const;          // slots leased now
    int kept() const;          // free slots keeping a conversation
    int queued() const;        // requests waiting for a slot
    size_t kv_bytes() const;   // sum of the slots' published KV bytes
    size_t kv_bytes(int slot) const;
    int32_t n_ctx() const;     // context of every slot
    size_t kv_memory() const { return kv_memory_; }  // the bound (0: none)
    size_t kv_reserved() const;                      // bytes reserved by running requests

    // Every forward step of every slot goes through it (GenerateOptions::scheduler).
    StepScheduler& scheduler() { return scheduler_; }
    const StepScheduler& scheduler() const { return scheduler_; }

private:
    friend class SlotLease;
    void release(Slot& slot, size_t reserved);
    void unreserve(size_t bytes);  // part of a running request's reservation comes free
    // The free slot to lease (nullptr: the named slot is busy) and the prompt tokens it holds.
    Slot* pick(const SlotRequest& request, int32_t& reuse) const;  // under mutex_
    // Under mutex_: whether `bytes` fit beside the reservations and the idle slots' kept
    // conversations (other than `taking`), dropping those least recently used first if needed.
    bool make_room(size_t bytes, const Slot* taking);
    void next_ticket();  // under mutex_: serving_ moves past the tickets that left the queue
    void leave_queue(std::unique_lock<std::mutex>& lock, uint64_t ticket);  // a waiter gives up

    std::vector<std::unique_ptr<Slot>> slots_;
    mutable std::mutex mutex_;
    std::condition_variable freed_;
    std::vector<Slot*> free_;   // free slots, lowest id last (taken first)
    int queued_ = 0;
    uint64_t next_ticket_ = 0;  // first come, first served among waiters
    uint64_t serving_ = 0;
    uint64_t clock_ = 0;        // leases so far (Slot::last_used)
    std::vector<uint64_t> abandoned_;  // tickets that timed out before their turn
    size_t kv_memory_ = 0;
    size_t reserved_ = 0;
    StepScheduler scheduler_;
};

}  // namespace kvec::server
