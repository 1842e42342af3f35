// Threads for the forward pass (OpenMP): what the tools' -t sets.
#pragma once

namespace kvec {

// n <= 0 picks the number of hardware threads. OpenMP's count is per thread: call it on the
// thread that will run the forward passes.
void set_num_threads(int n);
int num_threads();

}  // namespace kvec
