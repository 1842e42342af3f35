// The last `capacity` rows of a stream of query rows, with their positions: per layer, the
// post-RoPE queries of decode-time window scores and the pre-RoPE queries of policies that model
// the query distribution (ObservationRequest::queries).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace kvec {

class QueryRing {
public:
    QueryRing() = default;  // capacity 0: holds nothing
    QueryRing(int32_t capacity, int64_t width)
        : capacity_(capacity), width_(width), rows_(static_cast<size_t>(capacity * width)),
          positions_(static_cast<size_t>(capacity)) {}

    // Appends the last min(T, capacity) rows of rows [T, width] at positions [T].
    void append(const float* rows, int32_t T, const int32_t* positions) {
        for (int32_t t = std::max(0, T - capacity_); t < T; ++t) {
            std::copy_n(rows + t * width_, width_, rows_.begin() + next_ * width_);
            positions_[static_cast<size_t>(next_)] = positions[t];
            next_ = (next_ + 1) % capacity_;
            count_ = std::min(capacity_, count_ + 1);
        }
    }
    void clear() { count_ = next_ = 0; }

    int32_t count() const { return count_; }
    // Slot s in [0, count()), in storage order (not age): its row [width] and position.
    const float* row(int32_t s) const { return rows_.data() + s * width_; }
    int32_t position(int32_t s) const { return positions_[static_cast<size_t>(s)]; }
    // The slot of the i-th oldest row, i in [0, count()).
    int32_t oldest(int32_t i) const { return (next_ - count_ + i + capacity_) % capacity_; }

private:
    int32_t capacity_ = 0;
    int64_t width_ = 0;
    std::vector<float> rows_;          // [capacity, width]
    std::vector<int32_t> positions_;   // [capacity]
    int32_t count_ = 0;
    int32_t next_ = 0;                 // the slot the next row goes to
};

}  // namespace kvec
