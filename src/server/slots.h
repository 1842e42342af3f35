// Slots: the --parallel N sessions of the server, each with its own KV cache. A request leases a
// free slot for its whole generation; requests beyond N wait in a first-come, first-served queue.
// A slot's cache is emptied (its memory freed) when the lease ends, whether the request finished,
// failed or its client went away. The KV bytes of each slot are published for /metrics as the
// generation proceeds (Slot::publish_kv_bytes from the generating thread).
//
// Generation in this first version runs one forward step at a time across all slots
// (forward_mutex): slots interleave step by step, but do not batch. Continuous batching would
// replace that mutex by a scheduler that runs one step for every active slot at once.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "model/model.h"
#include "model/session.h"

namespace kvec::server {

struct Slot {
    int id = 0;
    std::unique_ptr<Session> session;
    std::atomic<size_t> kv_bytes{0};  // the session's cache allocation, as last published

    void publish_kv_bytes() { kv_bytes.store(session->kv_cache().bytes(), std::memory_order_relaxed); }
};

class SlotPool;

// A leased slot; returns it to the pool (cache emptied) when destroyed.
class SlotLease {
public:
    SlotLease(SlotPool& pool, Slot& slot) : pool_(&pool), slot_(&slot) {}
    SlotLease(SlotLease&& other) noexcept : pool_(other.pool_), slot_(other.slot_) { other.slot_ = nullptr; }
    SlotLease(const SlotLease&) = delete;
    SlotLease& operator=(const SlotLease&) = delete;
    SlotLease& operator=(SlotLease&&) = delete;
    ~SlotLease();

    Slot& slot() const { return *slot_; }

private:
    SlotPool* pool_;
    Slot* slot_;
};

class SlotPool {
public:
    // n slots of sessions on `model` (kvec::Error for n < 1).
    SlotPool(const Model& model, const SessionOptions& options, int n);

    // Waits for a free slot (first come, first served) and leases it.
    SlotLease acquire();

    int size() const { return static_cast<int>(slots_.size()); }
    int busy() const;          // slots leased now
    int queued() const;        // requests waiting for a slot
    size_t kv_bytes() const;   // sum of the slots' published KV bytes
    size_t kv_bytes(int slot) const;
    int32_t n_ctx() const;     // context of every slot

    // Held around every forward step of every slot (GenerateOptions::forward_mutex).
    std::mutex& forward_mutex() { return forward_mutex_; }

private:
    friend class SlotLease;
    void release(Slot& slot);

    std::vector<std::unique_ptr<Slot>> slots_;
    mutable std::mutex mutex_;
    std::condition_variable freed_;
    std::vector<Slot*> free_;   // free slots, lowest id last (taken first)
    int queued_ = 0;
    uint64_t next_ticket_ = 0;  // first come, first served among waiters
    uint64_t serving_ = 0;
    std::mutex forward_mutex_;
};

}  // namespace kvec::server
