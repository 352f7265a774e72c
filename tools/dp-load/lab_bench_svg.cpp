// SPDX-License-Identifier: Apache-2.0
// dp-lab bench's picture (lab_bench.h): per-rail utilisation over time.
#include <cmath>
#include <fstream>

#include "lab_bench.h"

namespace bench {

// Per-rail utilisation over time, one panel per mode (the first round's run).
void write_svg(const std::string& file, const std::vector<json>& runs,
               const std::vector<std::string>& modes) {
  const int W = 720, H = 140, pad = 40;
  std::ofstream s(file);
  s << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W + 2 * pad << "' height='"
    << modes.size() * (H + pad) + pad << "' font-family='sans-serif' font-size='12'>\n"
    << "<rect width='100%' height='100%' fill='white'/>\n";
  int row = 0;
  for (auto& m : modes) {
    const json* run = nullptr;
    for (auto& r : runs)
      if (r["mode"] == m && r.value("complete", false)) {
        run = &r;
        break;
      }
    double y0 = pad + row * (H + pad);
    s << "<text x='" << pad << "' y='" << y0 - 6 << "' font-weight='bold'>" << m
      << " (utilisation per rail, both directions)</text>\n"
      << "<rect x='" << pad << "' y='" << y0 << "' width='" << W << "' height='" << H
      << "' fill='none' stroke='#999'/>\n";
    for (int g : {25, 50, 75, 100})
      s << "<line x1='" << pad << "' x2='" << pad + W << "' y1='" << y0 + H - H * g / 100.0
        << "' y2='" << y0 + H - H * g / 100.0 << "' stroke='#eee'/><text x='" << 4 << "' y='"
        << y0 + H - H * g / 100.0 + 4 << "'>" << g << "%</text>\n";
    if (run) {
      const json& ser = (*run)["utilisation"]["series"];
      double tmax = 1;
      for (auto& p : ser) tmax = std::max(tmax, p[0].get<double>());
      const char* colour[2] = {"#1f77b4", "#d62728"};
      for (int r = 0; r < 2; ++r) {
        s << "<polyline fill='none' stroke='" << colour[r] << "' stroke-width='1.5' points='";
        for (auto& p : ser)
          s << pad + W * p[0].get<double>() / tmax << ","
            << y0 + H - H * std::min(1.05, p[r + 1].get<double>()) << " ";
        s << "'/>\n<text x='" << pad + W - 60 << "' y='" << y0 + 14 + 14 * r << "' fill='"
          << colour[r] << "'>rail" << r << "</text>\n";
      }
      s << "<text x='" << pad + W - 20 << "' y='" << y0 + H + 14 << "'>" << std::lround(tmax)
        << "s</text>\n";
    }
    ++row;
  }
  s << "</svg>\n";
}

}  // namespace bench
