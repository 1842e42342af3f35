// Line charts as PNG files (cairo): axes with ticks and labels, a title, one coloured line with
// markers per series, a legend. Enough for `kvec eval`'s score-vs-budget and coverage-vs-budget
// plots, readable without any other tool.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace kvec::eval {

struct PlotSeries {
    std::string name;
    std::vector<double> x;  // [n] (non-finite y values are skipped)
    std::vector<double> y;  // [n]
    bool dashed = false;    // reference lines (e.g. the full cache)
};

struct PlotSpec {
    std::string title;
    std::string x_label;
    std::string y_label;
    bool log2_x = false;           // budgets: equal spacing for 64, 128, 256, ...
    std::vector<double> x_ticks;   // empty: automatic
    double y_min = std::numeric_limits<double>::quiet_NaN();  // NaN: automatic
    double y_max = std::numeric_limits<double>::quiet_NaN();
    std::vector<PlotSeries> series;
    int width = 960;
    int height = 600;
};

// A "metric vs KV budget" chart: the budgets sorted on a log2 x axis, one series per policy with
// y = value(policy index, budget) (NaN: no point); an unbudgeted policy (budgeted[p] false) is a
// dashed "(no eviction)" reference line. y_min / y_max NaN: automatic.
PlotSpec budget_plot(const std::string& title, const std::string& y_label, const std::vector<int64_t>& budgets,
                     const std::vector<std::string>& policies, const std::vector<bool>& budgeted,
                     const std::function<double(size_t policy, int64_t budget)>& value, double y_min, double y_max);

// Writes the chart; kvec::Error if cairo cannot create or write the image, or the spec is empty.
void write_line_plot_png(const PlotSpec& spec, const std::string& path);

// "Nice" tick values covering [lo, hi] (about `target` of them, steps 1, 2, 2.5 or 5 x 10^k).
std::vector<double> nice_ticks(double lo, double hi, int target = 6);

}  // namespace kvec::eval
