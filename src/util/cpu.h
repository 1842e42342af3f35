// CPU features that __builtin_cpu_supports cannot name with every compiler (clang 14 does not
// know "f16c"; the fuzz preset builds with clang).
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace kvec {

// F16C (half-float conversions): CPUID leaf 1, ECX bit 29.
inline bool cpu_has_f16c() {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(1, &a, &b, &c, &d) == 0) return false;
    return (c & (1u << 29)) != 0;
#else
    return false;
#endif
}

}  // namespace kvec
