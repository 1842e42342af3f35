#include "eval/plot.h"

#include <cairo.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "util/atomic_file.h"
#include "util/error.h"

#if defined(__SANITIZE_ADDRESS__)
// cairo's toy font API makes fontconfig load its configuration once per process and keep it for
// the process's lifetime (never freed, by design); LeakSanitizer would report that at exit in the
// sanitizer builds. Linked in wherever plots are drawn (kvec, the eval tests).
extern "C" const char* __lsan_default_suppressions() { return "leak:libfontconfig.so\n"; }
#endif

namespace kvec::eval {

namespace {

struct Rgb {
    double r, g, b;
};

// Tableau 10: distinguishable colours.
const Rgb kPalette[] = {{0.122, 0.467, 0.706}, {1.000, 0.498, 0.055}, {0.173, 0.627, 0.173},
                        {0.839, 0.153, 0.157}, {0.580, 0.404, 0.741}, {0.549, 0.337, 0.294},
                        {0.890, 0.467, 0.761}, {0.498, 0.498, 0.498}, {0.737, 0.741, 0.133},
                        {0.090, 0.745, 0.812}};

std::string tick_label(double v) {
    if (v == std::floor(v) && std::fabs(v) < 1e9) return fmt::format("{}", static_cast<int64_t>(v));
    std::string s = fmt::format("{:.3g}", v);
    return s;
}

void text_at(cairo_t* cr, const std::string& s, double x, double y, double align_x, double align_y) {
    cairo_text_extents_t e;
    cairo_text_extents(cr, s.c_str(), &e);
    cairo_move_to(cr, x - e.x_bearing - align_x * e.width, y - e.y_bearing - align_y * e.height);
    cairo_show_text(cr, s.c_str());
}

// Marker shape k (circle, square, triangle, diamond, inverted triangle), so that series with the
// same values stay distinguishable.
void marker(cairo_t* cr, double x, double y, size_t k) {
    const double r = 4.5;
    switch (k % 5) {
        case 0: cairo_arc(cr, x, y, r, 0, 2 * M_PI); break;
        case 1: cairo_rectangle(cr, x - r, y - r, 2 * r, 2 * r); break;
        case 2:
            cairo_move_to(cr, x, y - r * 1.3);
            cairo_line_to(cr, x + r * 1.2, y + r);
            cairo_line_to(cr, x - r * 1.2, y + r);
            cairo_close_path(cr);
            break;
        case 3:
            cairo_move_to(cr, x, y - r * 1.4);
            cairo_line_to(cr, x + r * 1.2, y);
            cairo_line_to(cr, x, y + r * 1.4);
            cairo_line_to(cr, x - r * 1.2, y);
            cairo_close_path(cr);
            break;
        default:
            cairo_move_to(cr, x, y + r * 1.3);
            cairo_line_to(cr, x + r * 1.2, y - r);
            cairo_line_to(cr, x - r * 1.2, y - r);
            cairo_close_path(cr);
            break;
    }
    cairo_fill(cr);
}

// The marker of series si: colours repeat every 10 series, so the shape steps on every repeat and
// series si and si + 10 never look the same.
size_t marker_shape(size_t si) { return si + si / std::size(kPalette); }

}  // namespace

PlotSpec budget_plot(const std::string& title, const std::string& y_label, const std::vector<int64_t>& budgets,
                     const std::vector<std::string>& policies, const std::vector<bool>& budgeted,
                     const std::function<double(size_t policy, int64_t budget)>& value, double y_min, double y_max) {
    KVEC_CHECK(policies.size() == budgeted.size());
    PlotSpec spec;
    spec.title = title;
    spec.y_label = y_label;
    // Budgets on a log2 axis; compression ratios (negative codes, sweep.h) on a linear one.
    const bool ratios = !budgets.empty() && std::all_of(budgets.begin(), budgets.end(), [](int64_t b) { return b < 0; });
    spec.x_label = ratios ? "compression ratio (share of the prompt's entries evicted)"
                          : "KV budget B (entries per head per layer)";
    spec.log2_x = !ratios;
    std::vector<int64_t> columns;  // [budgets] in x order
    for (int64_t b : budgets) {
        if (ratios || b > 0) columns.push_back(b);
    }
    auto x_of = [ratios](int64_t b) { return ratios ? static_cast<double>(-b) / 1000.0 : static_cast<double>(b); };
    std::sort(columns.begin(), columns.end(), [&](int64_t a, int64_t b) { return x_of(a) < x_of(b); });
    for (int64_t b : columns) spec.x_ticks.push_back(x_of(b));
    spec.y_min = y_min;
    spec.y_max = y_max;
    for (size_t p = 0; p < policies.size(); ++p) {
        PlotSeries series;
        series.name = budgeted[p] ? policies[p] : policies[p] + " (no eviction)";
        series.dashed = !budgeted[p];
        for (int64_t b : columns) {
            series.x.push_back(x_of(b));
            series.y.push_back(value(p, b));
        }
        spec.series.push_back(std::move(series));
    }
    return spec;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
    if (!(hi > lo)) return {lo};
    const double raw = (hi - lo) / std::max(1, target);
    const double mag = std::pow(10.0, std::floor(std::log10(raw)));
    double step = mag;
    for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
        step = m * mag;
        if (step >= raw) break;
    }
    std::vector<double> out;
    const double k0 = std::ceil(lo / step - 1e-9);
    for (int i = 0;; ++i) {
        const double v = (k0 + i) * step;  // multiples of step: no drift from repeated addition
        if (v > hi + step * 1e-9) break;
        out.push_back(std::fabs(v) < step * 1e-9 ? 0.0 : v);
    }
    return out;
}

void write_line_plot_png(const PlotSpec& spec, const std::string& path) {
    double x_lo = INFINITY, x_hi = -INFINITY, y_lo = INFINITY, y_hi = -INFINITY;
    auto tx = [&](double x) { return spec.log2_x ? std::log2(x) : x; };
    for (const PlotSeries& s : spec.series) {
        KVEC_CHECK(s.x.size() == s.y.size());
        for (size_t i = 0; i < s.x.size(); ++i) {
            if (!std::isfinite(s.y[i]) || !std::isfinite(s.x[i])) continue;
            if (spec.log2_x && s.x[i] <= 0) continue;
            x_lo = std::min(x_lo, tx(s.x[i]));
            x_hi = std::max(x_hi, tx(s.x[i]));
            y_lo = std::min(y_lo, s.y[i]);
            y_hi = std::max(y_hi, s.y[i]);
        }
    }
    for (double t : spec.x_ticks) {
        x_lo = std::min(x_lo, tx(t));
        x_hi = std::max(x_hi, tx(t));
    }
    if (!std::isfinite(x_lo) || !std::isfinite(y_lo)) fail("plot '{}': no data points", spec.title);
    if (!std::isnan(spec.y_min)) y_lo = spec.y_min;
    if (!std::isnan(spec.y_max)) y_hi = spec.y_max;
    if (y_hi <= y_lo) {
        y_lo -= 1;
        y_hi += 1;
    }
    if (x_hi <= x_lo) {
        x_lo -= 1;
        x_hi += 1;
    }
    const double x_pad = (x_hi - x_lo) * 0.05;
    x_lo -= x_pad;
    x_hi += x_pad;
    // Automatic ends: 5% of room beyond the data (not below 0 for non-negative data), then out to
    // the next tick, so no point sits on the frame.
    const double y_pad = (y_hi - y_lo) * 0.05;
    if (std::isnan(spec.y_min)) y_lo = (y_lo >= 0 && y_lo - y_pad < 0) ? 0.0 : y_lo - y_pad;
    if (std::isnan(spec.y_max)) y_hi += y_pad;
    std::vector<double> y_ticks = nice_ticks(y_lo, y_hi, 6);
    if (y_ticks.size() >= 2) {
        const double step = y_ticks[1] - y_ticks[0];
        if (std::isnan(spec.y_min)) y_lo = std::floor(y_lo / step + 1e-9) * step;
        if (std::isnan(spec.y_max)) y_hi = std::ceil(y_hi / step - 1e-9) * step;
        y_ticks = nice_ticks(y_lo, y_hi, 6);
    }

    const int W = spec.width, H = spec.height;
    cairo_surface_t* surface = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, W, H);
    if (cairo_surface_status(surface) != CAIRO_STATUS_SUCCESS) {
        cairo_surface_destroy(surface);
        fail("plot: cannot create a {}x{} image", W, H);
    }
    cairo_t* cr = cairo_create(surface);
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);

    // Plot area; the legend goes to the right of it.
    const double left = 80, top = 50, bottom = H - 70.0, legend_w = 220;
    const double right = W - legend_w - 20.0;
    auto px = [&](double x) { return left + (tx(x) - x_lo) / (x_hi - x_lo) * (right - left); };
    auto py = [&](double y) { return bottom - (y - y_lo) / (y_hi - y_lo) * (bottom - top); };

    // Title and axis labels.
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_set_font_size(cr, 18);
    text_at(cr, spec.title, (left + right) / 2, 18, 0.5, 0.0);
    cairo_set_font_size(cr, 14);
    text_at(cr, spec.x_label, (left + right) / 2, H - 28.0, 0.5, 0.0);
    cairo_save(cr);
    cairo_translate(cr, 20, (top + bottom) / 2);
    cairo_rotate(cr, -M_PI / 2);
    text_at(cr, spec.y_label, 0, 0, 0.5, 0.0);
    cairo_restore(cr);

    // Grid and ticks.
    cairo_set_font_size(cr, 12);
    cairo_set_line_width(cr, 1);
    for (double v : y_ticks) {
        if (v < y_lo - 1e-12 || v > y_hi + 1e-12) continue;
        cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
        cairo_move_to(cr, left, py(v));
        cairo_line_to(cr, right, py(v));
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0, 0, 0);
        cairo_move_to(cr, left - 5, py(v));
        cairo_line_to(cr, left, py(v));
        cairo_stroke(cr);
        text_at(cr, tick_label(v), left - 8, py(v), 1.0, 0.5);
    }
    std::vector<double> x_ticks = spec.x_ticks;
    if (x_ticks.empty()) {
        for (double v : nice_ticks(x_lo + x_pad, x_hi - x_pad, 6)) x_ticks.push_back(spec.log2_x ? std::exp2(v) : v);
    }
    for (double v : x_ticks) {
        cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
        cairo_move_to(cr, px(v), top);
        cairo_line_to(cr, px(v), bottom);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0, 0, 0);
        cairo_move_to(cr, px(v), bottom);
        cairo_line_to(cr, px(v), bottom + 5);
        cairo_stroke(cr);
        text_at(cr, tick_label(v), px(v), bottom + 8, 0.5, 0.0);
    }
    // Axes box.
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_set_line_width(cr, 1.2);
    cairo_rectangle(cr, left, top, right - left, bottom - top);
    cairo_stroke(cr);

    // Series.
    cairo_save(cr);
    cairo_rectangle(cr, left, top, right - left, bottom - top);
    cairo_clip(cr);
    for (size_t si = 0; si < spec.series.size(); ++si) {
        const PlotSeries& s = spec.series[si];
        const Rgb c = kPalette[si % std::size(kPalette)];
        cairo_set_source_rgb(cr, c.r, c.g, c.b);
        cairo_set_line_width(cr, 2.2);
        const double dash[] = {7.0, 5.0};
        cairo_set_dash(cr, dash, s.dashed ? 2 : 0, 0);
        bool pen = false;
        for (size_t i = 0; i < s.x.size(); ++i) {
            if (!std::isfinite(s.y[i]) || (spec.log2_x && s.x[i] <= 0)) {
                pen = false;
                continue;
            }
            if (pen) {
                cairo_line_to(cr, px(s.x[i]), py(s.y[i]));
            } else {
                cairo_move_to(cr, px(s.x[i]), py(s.y[i]));
                pen = true;
            }
        }
        cairo_stroke(cr);
        cairo_set_dash(cr, dash, 0, 0);
        if (!s.dashed) {
            for (size_t i = 0; i < s.x.size(); ++i) {
                if (!std::isfinite(s.y[i]) || (spec.log2_x && s.x[i] <= 0)) continue;
                marker(cr, px(s.x[i]), py(s.y[i]), marker_shape(si));
            }
        }
    }
    cairo_restore(cr);

    // Legend.
    cairo_set_font_size(cr, 13);
    double ly = top + 10;
    for (size_t si = 0; si < spec.series.size(); ++si) {
        const PlotSeries& s = spec.series[si];
        const Rgb c = kPalette[si % std::size(kPalette)];
        const double lx = right + 20;
        cairo_set_source_rgb(cr, c.r, c.g, c.b);
        cairo_set_line_width(cr, 2.2);
        const double dash[] = {7.0, 5.0};
        cairo_set_dash(cr, dash, s.dashed ? 2 : 0, 0);
        cairo_move_to(cr, lx, ly);
        cairo_line_to(cr, lx + 30, ly);
        cairo_stroke(cr);
        cairo_set_dash(cr, dash, 0, 0);
        if (!s.dashed) {
            marker(cr, lx + 15, ly, marker_shape(si));
        }
        cairo_set_source_rgb(cr, 0, 0, 0);
        text_at(cr, s.name, lx + 38, ly, 0.0, 0.5);
        ly += 22;
    }

    cairo_destroy(cr);
    // Encoded in memory, then replaced whole (util/atomic_file.h): never a torn PNG.
    std::string png;
    const cairo_status_t st = cairo_surface_write_to_png_stream(
        surface,
        [](void* out, const unsigned char* data, unsigned int n) {
            static_cast<std::string*>(out)->append(reinterpret_cast<const char*>(data), n);
            return CAIRO_STATUS_SUCCESS;
        },
        &png);
    cairo_surface_destroy(surface);
    if (st != CAIRO_STATUS_SUCCESS) fail("cannot write plot '{}': {}", path, cairo_status_to_string(st));
    write_file_atomic(path, png);
}

}  // namespace kvec::eval
