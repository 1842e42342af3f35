#include "server/slots.h"

#include "util/error.h"

namespace kvec::server {

SlotLease::~SlotLease() {
    if (slot_ != nullptr) pool_->release(*slot_);
}

SlotPool::SlotPool(const Model& model, const SessionOptions& options, int n) {
    if (n < 1) fail("--parallel must be at least 1, got {}", n);
    for (int i = 0; i < n; ++i) {
        auto slot = std::make_unique<Slot>();
        slot->id = i;
        slot->session = std::make_unique<Session>(model, options);
        slots_.push_back(std::move(slot));
    }
    for (int i = n - 1; i >= 0; --i) free_.push_back(slots_[static_cast<size_t>(i)].get());
}

SlotLease SlotPool::acquire() {
    std::unique_lock<std::mutex> lock(mutex_);
    const uint64_t ticket = next_ticket_++;
    ++queued_;
    freed_.wait(lock, [&] { return ticket == serving_ && !free_.empty(); });
    --queued_;
    ++serving_;
    Slot* slot = free_.back();
    free_.pop_back();
    lock.unlock();
    freed_.notify_all();  // the next ticket may find another free slot
    return SlotLease(*this, *slot);
}

void SlotPool::release(Slot& slot) {
    // Frees the cache's memory and detaches the request's policy (it dies with the request).
    slot.session->reset();
    slot.session->set_evictor(nullptr);
    slot.publish_kv_bytes();
    {
        std::lock_guard<std::mutex> lock(mutex_);
        free_.push_back(&slot);
    }
    freed_.notify_all();
}

int SlotPool::busy() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return size() - static_cast<int>(free_.size());
}

int SlotPool::queued() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return queued_;
}

size_t SlotPool::kv_bytes() const {
    size_t total = 0;
    for (const auto& s : slots_) total += s->kv_bytes.load(std::memory_order_relaxed);
    return total;
}

size_t SlotPool::kv_bytes(int slot) const { return slots_.at(static_cast<size_t>(slot))->kv_bytes.load(std::memory_order_relaxed); }

int32_t SlotPool::n_ctx() const { return slots_.front()->session->n_ctx(); }

}  // namespace kvec::server
