#include "server/slots.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <tuple>

#include "util/error.h"

namespace kvec::server {

SlotLease::~SlotLease() {
    if (slot_ != nullptr) pool_->release(*slot_, reserved_);
}

void SlotLease::settle() {
    if (slot_ == nullptr || steady_ >= reserved_) return;
    pool_->unreserve(reserved_ - steady_);
    reserved_ = steady_;
}

void SlotPool::unreserve(size_t bytes) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        reserved_ -= bytes;
    }
    freed_.notify_all();
}

SlotPool::SlotPool(const Model& model, const SessionOptions& options, int n, size_t kv_memory) : kv_memory_(kv_memory) {
    if (n < 1) fail("--parallel must be at least 1, got {}", n);
    for (int i = 0; i < n; ++i) {
        auto slot = std::make_unique<Slot>();
        slot->id = i;
        slot->session = std::make_unique<Session>(model, options);
        slots_.push_back(std::move(slot));
    }
    for (int i = n - 1; i >= 0; --i) free_.push_back(slots_[static_cast<size_t>(i)].get());
}

namespace {

// Prompt tokens slot s's kept conversation of policy spec holds (at most all but the last prompt
// token, which is run again for its logits); 0 when it keeps none of that policy.
int32_t reusable(const Slot& s, std::span<const int32_t> prompt, const std::string* spec) {
    if (spec == nullptr || prompt.empty() || !s.kept || s.kept->spec != *spec) return 0;
    const std::vector<int32_t>& held = s.session->tokens();
    const size_t n = std::min(held.size(), prompt.size() - 1);
    return static_cast<int32_t>(
        std::mismatch(held.begin(), held.begin() + static_cast<std::ptrdiff_t>(n), prompt.begin()).first -
        held.begin());
}

}  // namespace

Slot* SlotPool::pick(const SlotRequest& request, int32_t& reuse) const {
    reuse = 0;
    if (request.slot >= 0) {  // that slot or none (it is busy)
        const auto it = std::find_if(free_.begin(), free_.end(), [&](const Slot* s) { return s->id == request.slot; });
        if (it == free_.end()) return nullptr;
        reuse = reusable(**it, request.prompt, request.reuse_spec);
        return *it;
    }
    Slot* best = nullptr;
    for (Slot* s : free_) {
        const int32_t common = reusable(*s, request.prompt, request.reuse_spec);
        if (common > reuse) {
            reuse = common;
            best = s;
        }
    }
    if (best != nullptr) return best;
    for (auto it = free_.rbegin(); it != free_.rend(); ++it) {  // lowest id first
        if (!(*it)->kept) return *it;
    }
    for (Slot* s : free_) {
        if (best == nullptr || s->last_used < best->last_used) best = s;
    }
    return best;
}

bool SlotPool::make_room(size_t bytes, const Slot* taking) {
    if (kv_memory_ == 0) return true;
    // Beside the running requests' reservations it cannot fit, whatever is dropped: keep the
    // kept conversations (dropping them would lose them and make no room).
    if (reserved_ + bytes > kv_memory_) return false;
    std::vector<Slot*> kept;  // idle slots whose conversations hold memory
    size_t in_use = reserved_;
    for (Slot* s : free_) {
        if (s == taking || !s->kept) continue;
        kept.push_back(s);
        in_use += s->kv_bytes.load(std::memory_order_relaxed);
    }
    std::sort(kept.begin(), kept.end(), [](const Slot* a, const Slot* b) { return a->last_used < b->last_used; });
    for (Slot* s : kept) {
        if (in_use + bytes <= kv_memory_) break;
        in_use -= s->kv_bytes.load(std::memory_order_relaxed);
        s->kept.reset();  // a free slot: nobody else touches it while the pool's lock is held
        s->session->reset();
        s->session->set_evictor(nullptr);
        s->publish_kv_bytes();
    }
    return in_use + bytes <= kv_memory_;
}

void SlotPool::next_ticket() {
    ++serving_;
    for (auto it = std::find(abandoned_.begin(), abandoned_.end(), serving_); it != abandoned_.end();
         it = std::find(abandoned_.begin(), abandoned_.end(), serving_)) {
        abandoned_.erase(it);
        ++serving_;
    }
}

void SlotPool::leave_queue(std::unique_lock<std::mutex>& lock, uint64_t ticket) {
    --queued_;
    if (ticket == serving_) {
        next_ticket();
    } else {
        abandoned_.push_back(ticket);
    }
    lock.unlock();
    freed_.notify_all();
}

SlotLease SlotPool::acquire(const SlotRequest& request) {
    if (request.slot >= size()) fail("slot {} does not exist (the server has slots 0 to {})", request.slot, size() - 1);
    if (kv_memory_ > 0 && request.kv_bytes > kv_memory_) {
        fail("the request may need {} bytes of KV cache, more than the server's --kv-memory of {} bytes: ask for fewer "
             "tokens or a smaller budget", request.kv_bytes, kv_memory_);
    }
    std::unique_lock<std::mutex> lock(mutex_);
    const uint64_t ticket = next_ticket_++;
    ++queued_;
    Slot* slot = nullptr;
    int32_t reuse = 0;
    size_t peak = request.kv_bytes, steady = request.kv_steady_bytes;
    const auto ready = [&] {
        if (ticket != serving_ || free_.empty()) return false;
        slot = pick(request, reuse);
        if (slot == nullptr) return false;
        peak = request.kv_bytes;
        steady = request.kv_steady_bytes;
        if (reuse > 0 && request.reserve_reused) {
            std::tie(peak, steady) = request.reserve_reused(reuse, slot->kv_bytes.load(std::memory_order_relaxed));
        }
        return make_room(peak, slot);
    };
    // Waits until ready, the timeout, or the client gone (asked every 100 ms).
    using Clock = std::chrono::steady_clock;
    const Clock::time_point deadline =
        request.timeout.count() > 0 ? Clock::now() + request.timeout : Clock::time_point::max();
    while (!ready()) {
        if (Clock::now() >= deadline) {
            leave_queue(lock, ticket);
            throw Timeout(fmt::format("no slot and KV memory came free within {} s", request.timeout.count() / 1000.0));
        }
        if (request.gone && request.gone()) {
            leave_queue(lock, ticket);
            throw Gone("the client went away while its request waited for a slot");
        }
        if (request.gone) {
            freed_.wait_until(lock, std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
        } else if (deadline != Clock::time_point::max()) {
            freed_.wait_until(lock, deadline);
        } else {
            freed_.wait(lock);
        }
    }
    --queued_;
    next_ticket();
    free_.erase(std::find(free_.begin(), free_.end(), slot));
    slot->last_used = ++clock_;
    const size_t reserved = kv_memory_ > 0 ? peak : 0;
    reserved_ += reserved;
    lock.unlock();
    freed_.notify_all();  // the next ticket may find another free slot
    return SlotLease(*this, *slot, reuse, reserved, kv_memory_ > 0 ? std::min(steady, reserved) : 0);
}

std::optional<SlotLease> SlotPool::try_acquire(int id) {
    if (id < 0 || id >= size()) fail("slot {} does not exist (the server has slots 0 to {})", id, size() - 1);
    std::lock_guard<std::mutex> lock(mutex_);
    Slot* slot = slots_[static_cast<size_t>(id)].get();
    const auto it = std::find(free_.begin(), free_.end(), slot);
    if (it == free_.end()) return std::nullopt;
    free_.erase(it);
    return SlotLease(*this, *slot);
}

bool SlotPool::make_room_for_kept(const Slot& slot, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    return make_room(bytes, &slot);
}

void SlotPool::release(Slot& slot, size_t reserved) {
    // Frees the cache's memory and detaches the request's policy (it dies with the request),
    // unless the slot keeps its conversation.
    if (!slot.kept) {
        slot.session->reset();
        slot.session->set_evictor(nullptr);
    }
    slot.publish_kv_bytes();
    {
        std::lock_guard<std::mutex> lock(mutex_);
        free_.push_back(&slot);
        reserved_ -= reserved;
    }
    freed_.notify_all();
}

int SlotPool::kept() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int>(std::count_if(free_.begin(), free_.end(), [](const Slot* s) { return s->kept.has_value(); }));
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

size_t SlotPool::kv_reserved() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return reserved_;
}

int32_t SlotPool::n_ctx() const { return slots_.front()->session->n_ctx(); }

}  // namespace kvec::server
