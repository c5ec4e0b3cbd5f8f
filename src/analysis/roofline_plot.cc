// The roofline as pictures: an SVG plot written by hand (no plotting dependency) and an HTML page
// that inlines it with the tables.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "analysis/roofline.h"

namespace kiln::analysis {

namespace {

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  return o;
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// A decade label: 0.001 ... 10000 written out, 1e-4 / 1e5 beyond.
std::string decade(int e) {
  if (e < -3 || e > 4) return "1e" + std::to_string(e);
  char b[32];
  std::snprintf(b, sizeof b, "%.*f", e < 0 ? -e : 0, std::pow(10.0, e));
  return b;
}

const char* kFusedColour = "#1f5fbf";
const char* kUnfusedColour = "#e8730c";

// Plot geometry: the data area inside margins for labels and the legend.
struct Frame {
  double left = 78, top = 40, width = 640, height = 420;
  double lx0, lx1, ly0, ly1;  // log10 of the axis ranges
  double x(double v) const { return left + (std::log10(v) - lx0) / (lx1 - lx0) * width; }
  double y(double v) const { return top + height - (std::log10(v) - ly0) / (ly1 - ly0) * height; }
};

bool plottable(const KernelRoofline& k) { return k.flops > 0 && k.time_ms > 0 && k.dram_bytes > 0; }

}  // namespace

std::string roofline_svg(const RooflineReport& fused, const RooflineReport* unfused) {
  std::vector<const RooflineReport*> reports = {&fused};
  if (unfused) reports.push_back(unfused);
  const Roof& roof = fused.roof;
  // Axis ranges: whole decades around every dot and the ridge point.
  double xmin = roof.ridge(), xmax = roof.ridge(), ymin = roof.peak_gflops, ymax = roof.peak_gflops;
  int skipped = 0;
  for (const auto* r : reports)
    for (const auto& k : r->kernels) {
      if (!plottable(k)) {
        ++skipped;
        continue;
      }
      xmin = std::min(xmin, k.intensity), xmax = std::max(xmax, k.intensity);
      ymin = std::min(ymin, k.gflops), ymax = std::max(ymax, k.gflops);
    }
  if (!(xmin > 0)) xmin = 0.01;
  if (!(ymin > 0)) ymin = 0.01;
  Frame f;
  f.lx0 = std::floor(std::log10(xmin));
  f.lx1 = std::max(f.lx0 + 1, std::ceil(std::log10(xmax * 1.5)));
  f.ly0 = std::floor(std::log10(ymin));
  f.ly1 = std::max(f.ly0 + 1, std::ceil(std::log10(ymax * 1.5)));
  const double W = f.left + f.width + 300, H = f.top + f.height + 60;

  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" + fmt("%.0f", W) +
                  "\" height=\"" + fmt("%.0f", H) + "\" viewBox=\"0 0 " + fmt("%.0f", W) + " " + fmt("%.0f", H) +
                  "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s += "<title>Roofline: attained GFLOP/s against operational intensity</title>\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  // Grid and decade ticks.
  s += "<g id=\"grid\" stroke=\"#e4e4e4\" stroke-width=\"1\">\n";
  for (int e = int(f.lx0); e <= int(f.lx1); ++e)
    s += "<line x1=\"" + fmt("%.1f", f.x(std::pow(10.0, e))) + "\" y1=\"" + fmt("%.1f", f.top) + "\" x2=\"" +
         fmt("%.1f", f.x(std::pow(10.0, e))) + "\" y2=\"" + fmt("%.1f", f.top + f.height) + "\"/>\n";
  for (int e = int(f.ly0); e <= int(f.ly1); ++e)
    s += "<line x1=\"" + fmt("%.1f", f.left) + "\" y1=\"" + fmt("%.1f", f.y(std::pow(10.0, e))) + "\" x2=\"" +
         fmt("%.1f", f.left + f.width) + "\" y2=\"" + fmt("%.1f", f.y(std::pow(10.0, e))) + "\"/>\n";
  s += "</g>\n<g id=\"ticks\" fill=\"#333\">\n";
  for (int e = int(f.lx0); e <= int(f.lx1); ++e)
    s += "<text x=\"" + fmt("%.1f", f.x(std::pow(10.0, e))) + "\" y=\"" + fmt("%.1f", f.top + f.height + 16) +
         "\" text-anchor=\"middle\">" + decade(e) + "</text>\n";
  for (int e = int(f.ly0); e <= int(f.ly1); ++e)
    s += "<text x=\"" + fmt("%.1f", f.left - 6) + "\" y=\"" + fmt("%.1f", f.y(std::pow(10.0, e)) + 4) +
         "\" text-anchor=\"end\">" + decade(e) + "</text>\n";
  s += "</g>\n";
  s += "<rect x=\"" + fmt("%.1f", f.left) + "\" y=\"" + fmt("%.1f", f.top) + "\" width=\"" + fmt("%.1f", f.width) +
       "\" height=\"" + fmt("%.1f", f.height) + "\" fill=\"none\" stroke=\"#333\"/>\n";
  s += "<text id=\"xlabel\" x=\"" + fmt("%.1f", f.left + f.width / 2) + "\" y=\"" + fmt("%.1f", f.top + f.height + 40) +
       "\" text-anchor=\"middle\" font-size=\"13\">operational intensity (FLOP per byte of compulsory DRAM traffic)</text>\n";
  s += "<text id=\"ylabel\" transform=\"translate(20," + fmt("%.1f", f.top + f.height / 2) +
       ") rotate(-90)\" text-anchor=\"middle\" font-size=\"13\">attained performance (GFLOP/s)</text>\n";
  s += "<text x=\"" + fmt("%.1f", f.left) + "\" y=\"24\" font-size=\"14\" font-weight=\"bold\">Roofline, " +
       std::to_string(roof.threads) + " thread" + (roof.threads == 1 ? "" : "s") + "</text>\n";

  // The roof: DRAM bandwidth × intensity up to the ridge point, then the peak; the bandwidth line
  // starts where it enters the plot (at the bottom edge when it lies below the corner).
  const double x_lo = std::max(std::pow(10.0, f.lx0), std::pow(10.0, f.ly0) / roof.dram_gbps);
  const double x_hi = std::pow(10.0, f.lx1);
  s += "<g id=\"roof\" fill=\"none\" stroke=\"#222\" stroke-width=\"2\">\n";
  s += "<polyline id=\"bandwidth-roof\" points=\"" + fmt("%.1f", f.x(x_lo)) + "," + fmt("%.1f", f.y(roof.dram_gbps * x_lo)) +
       " " + fmt("%.1f", f.x(roof.ridge())) + "," + fmt("%.1f", f.y(roof.peak_gflops)) + "\"/>\n";
  s += "<polyline id=\"compute-roof\" points=\"" + fmt("%.1f", f.x(roof.ridge())) + "," +
       fmt("%.1f", f.y(roof.peak_gflops)) + " " + fmt("%.1f", f.x(x_hi)) + "," + fmt("%.1f", f.y(roof.peak_gflops)) +
       "\"/>\n</g>\n";
  s += "<text x=\"" + fmt("%.1f", f.x(x_hi) - 4) + "\" y=\"" + fmt("%.1f", f.y(roof.peak_gflops) - 6) +
       "\" text-anchor=\"end\">peak " + fmt("%.0f", roof.peak_gflops) + " GFLOP/s</text>\n";
  const double xm = std::sqrt(x_lo * roof.ridge());  // label the bandwidth roof half-way along it (log scale)
  const double angle = -std::atan2(f.y(roof.dram_gbps * x_lo) - f.y(roof.peak_gflops), f.x(roof.ridge()) - f.x(x_lo)) * 180 / M_PI;
  s += "<text transform=\"translate(" + fmt("%.1f", f.x(xm)) + "," + fmt("%.1f", f.y(roof.dram_gbps * xm) - 6) +
       ") rotate(" + fmt("%.1f", angle) + ")\" text-anchor=\"middle\">DRAM " + fmt("%.1f", roof.dram_gbps) +
       " GB/s</text>\n";
  // The ridge point as a dashed drop line, labelled at the bottom where no dots crowd it.
  s += "<line id=\"ridge\" x1=\"" + fmt("%.1f", f.x(roof.ridge())) + "\" y1=\"" + fmt("%.1f", f.y(roof.peak_gflops)) +
       "\" x2=\"" + fmt("%.1f", f.x(roof.ridge())) + "\" y2=\"" + fmt("%.1f", f.top + f.height) +
       "\" stroke=\"#888\" stroke-dasharray=\"4 3\"/>\n";
  s += "<text x=\"" + fmt("%.1f", f.x(roof.ridge()) + 4) + "\" y=\"" + fmt("%.1f", f.top + f.height - 6) +
       "\" fill=\"#666\">ridge " + fmt("%.3g", roof.ridge()) + " FLOP/B</text>\n";

  // Dots: unfused first so the fused ones sit on top; the area grows with the kernel's time share.
  for (auto it = reports.rbegin(); it != reports.rend(); ++it) {
    const RooflineReport& r = **it;
    const char* colour = &r == &fused ? kFusedColour : kUnfusedColour;
    s += "<g id=\"" + esc(r.label) + "\" fill=\"" + colour + "\" fill-opacity=\"0.7\" stroke=\"white\">\n";
    for (const auto& k : r.kernels) {
      if (!plottable(k)) continue;
      const double share = r.kernel_ms > 0 ? k.time_ms / r.kernel_ms : 0;
      s += "<circle class=\"kernel\" cx=\"" + fmt("%.1f", f.x(k.intensity)) + "\" cy=\"" + fmt("%.1f", f.y(k.gflops)) +
           "\" r=\"" + fmt("%.1f", 3 + 12 * std::sqrt(share)) + "\"><title>" + esc(k.name) + " (" + r.label + "): " +
           fmt("%.4f", k.time_ms) + " ms, " + fmt("%.3g", k.intensity) + " FLOP/B, " + fmt("%.1f", k.gflops) +
           " GFLOP/s, " + (k.memory_bound ? "memory" : "compute") + "-bound, " + fmt("%.0f", k.percent_of_roof) +
           " % of roof</title></circle>\n";
    }
    s += "</g>\n";
  }

  // Legend, right of the plot.
  double lx = f.left + f.width + 20, ly = f.top + 10;
  s += "<g id=\"legend\">\n";
  s += "<line x1=\"" + fmt("%.1f", lx) + "\" y1=\"" + fmt("%.1f", ly) + "\" x2=\"" + fmt("%.1f", lx + 20) + "\" y2=\"" +
       fmt("%.1f", ly) + "\" stroke=\"#222\" stroke-width=\"2\"/><text x=\"" + fmt("%.1f", lx + 28) + "\" y=\"" +
       fmt("%.1f", ly + 4) + "\">roof: min(peak, DRAM × intensity)</text>\n";
  for (const auto* r : reports) {
    ly += 22;
    s += "<circle cx=\"" + fmt("%.1f", lx + 10) + "\" cy=\"" + fmt("%.1f", ly) + "\" r=\"5\" fill=\"" +
         (r == &fused ? kFusedColour : kUnfusedColour) + "\"/><text x=\"" + fmt("%.1f", lx + 28) + "\" y=\"" +
         fmt("%.1f", ly + 4) + "\">" + esc(r->label) + ": " + std::to_string(r->kernels.size()) + " kernels, " +
         fmt("%.3f", r->kernel_ms) + " ms</text>\n";
  }
  ly += 22;
  s += "<text x=\"" + fmt("%.1f", lx) + "\" y=\"" + fmt("%.1f", ly + 4) + "\" fill=\"#666\">dot area ∝ share of time</text>\n";
  if (skipped) {
    ly += 18;
    s += "<text x=\"" + fmt("%.1f", lx) + "\" y=\"" + fmt("%.1f", ly + 4) + "\" fill=\"#666\">" + std::to_string(skipped) +
         " kernel(s) without FLOPs not shown</text>\n";
  }
  s += "</g>\n</svg>\n";
  return s;
}

namespace {

std::string html_table(const RooflineReport& r) {
  std::string s = "<h2>" + esc(r.label) + "</h2>\n<p>" + std::to_string(r.kernels.size()) + " kernels, " +
                  fmt("%.4g", r.total_flops / 1e9) + " GFLOP (model), " + fmt("%.2f", double(r.total_dram_bytes) / 1e6) +
                  " MB compulsory DRAM traffic, kernels " + fmt("%.3f", r.kernel_ms) + " ms (median run " +
                  fmt("%.3f", r.model_ms) + " ms). Time in memory-bound kernels " +
                  fmt("%.1f", 100 * r.memory_time_share) + " % (" + fmt("%.1f", r.memory_percent_of_roof) +
                  " % of roof), in compute-bound kernels " + fmt("%.1f", 100 * r.compute_time_share) + " % (" +
                  fmt("%.1f", r.compute_percent_of_roof) + " % of roof; time-weighted).</p>\n";
  s += "<table><tr><th>#</th><th>kernel</th><th>kind</th><th>ms</th><th>time %</th><th>MFLOP</th><th>MB</th>"
       "<th>FLOP/B</th><th>GFLOP/s</th><th>GB/s</th><th>bound</th><th>% of roof</th></tr>\n";
  int i = 0;
  for (const auto& k : r.kernels)
    s += "<tr><td>" + std::to_string(++i) + "</td><td class=\"name\">" + esc(k.name) + "</td><td>" + esc(k.kind) +
         "</td><td>" + fmt("%.4f", k.time_ms) + "</td><td>" + fmt("%.1f", r.kernel_ms > 0 ? 100 * k.time_ms / r.kernel_ms : 0) +
         "</td><td>" + fmt("%.2f", k.flops / 1e6) + "</td><td>" + fmt("%.3f", double(k.dram_bytes) / 1e6) + "</td><td>" +
         fmt("%.2f", k.intensity) + "</td><td>" + fmt("%.1f", k.gflops) + "</td><td>" + fmt("%.1f", k.gbps) +
         "</td><td>" + (k.memory_bound ? "memory" : "compute") + "</td><td>" + fmt("%.1f", k.percent_of_roof) +
         "</td></tr>\n";
  return s + "</table>\n";
}

}  // namespace

std::string roofline_html(const std::string& model, const RooflineReport& fused, const RooflineReport* unfused,
                          const MachineModel& m) {
  std::string s = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>kiln roofline: " + esc(model) +
                  "</title>\n<style>body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse;"
                  "font-size:13px}td,th{border-bottom:1px solid #ddd;padding:3px 8px;text-align:right}"
                  "td.name{text-align:left;font-family:monospace}th{background:#f2f2f2}p{max-width:1000px}</style>"
                  "</head><body>\n";
  s += "<h1>Roofline: " + esc(model) + "</h1>\n<p>Machine: " + esc(m.cpu_model) + " (" + esc(m.isa) + "), probed " +
       esc(m.probed_at) + (m.quick ? " (quick probe: rough figures)" : "") + ". Roof for " +
       std::to_string(fused.roof.threads) + " thread(s): peak " + fmt("%.1f", fused.roof.peak_gflops) +
       " GFLOP/s, DRAM triad " + fmt("%.1f", fused.roof.dram_gbps) + " GB/s, ridge point " +
       fmt("%.3g", fused.roof.ridge()) + " FLOP/byte.</p>\n";
  s += "<p>FLOPs: a multiply-add counts 2, every other arithmetic operation on an element 1. DRAM bytes: every kernel "
       "input (weights included) read once and every output written once; data that stays in cache between kernels "
       "still counts, so kernels can sit above the DRAM roof. Times: medians over the runs.</p>\n";
  s += roofline_svg(fused, unfused);
  s += html_table(fused);
  if (unfused) s += html_table(*unfused);
  return s + "</body></html>\n";
}

}  // namespace kiln::analysis
