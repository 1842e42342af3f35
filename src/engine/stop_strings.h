// Streaming stop-string detection: text arrives in pieces; what may still become the start of a
// stop string is held back, everything else is released at once.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvec {

class StopStrings {
public:
    explicit StopStrings(std::vector<std::string> stops);  // empty strings are ignored

    // Adds text; returns the text that can be shown now. Once a stop string appears, returns the
    // text before it and stopped() becomes true (later pushes return "").
    std::string push(std::string_view text);
    // The held-back tail (call at the end of generation when no stop string was found).
    std::string flush();
    bool stopped() const { return stopped_; }
    const std::string& matched() const { return matched_; }  // the stop string found

private:
    std::vector<std::string> stops_;
    std::string pending_;
    bool stopped_ = false;
    std::string matched_;
};

}  // namespace kvec
