#include "progress.hpp"

#include <unistd.h>

#include <cstdio>
#include <utility>

#include <fmt/format.h>

#include "text.hpp"

namespace shmreplay::cli {

ProgressBar::ProgressBar(bool enabled, std::string subject)
    : enabled_(enabled), tty_(::isatty(STDERR_FILENO) != 0), subject_(std::move(subject)) {}

ProgressBar::~ProgressBar() {
  if (open_line_) std::fputs("\n", stderr);
}

void ProgressBar::operator()(std::string_view phase, uint64_t done_bytes, uint64_t total_bytes) {
  if (!enabled_) return;
  if (phase != phase_) {
    if (open_line_) std::fputs("\n", stderr);
    open_line_ = false;
    phase_ = std::string(phase);
    finished_ = false;
    last_tenth_ = -1;
    last_draw_ = {};
  }
  if (finished_) return;
  const bool done = done_bytes >= total_bytes;
  const double fraction = total_bytes == 0 ? 1.0 : static_cast<double>(done_bytes) / static_cast<double>(total_bytes);
  const std::string amounts = fmt::format("{} of {}", human_bytes(done_bytes), human_bytes(total_bytes));
  if (tty_) {
    const auto now = std::chrono::steady_clock::now();
    if (!done && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    fmt::print(stderr, "\r\x1b[K{} {} {} {:5.1f}%  {}", phase_, subject_, fill_bar(fraction, 30), 100.0 * fraction,
               amounts);
    open_line_ = !done;
    if (done) std::fputs("\n", stderr);
  } else {
    const int tenth = static_cast<int>(fraction * 10.0);
    if (tenth == last_tenth_ && !done) return;
    last_tenth_ = tenth;
    fmt::print(stderr, "{} {}: {:.0f}% ({})\n", phase_, subject_, 100.0 * fraction, amounts);
  }
  std::fflush(stderr);
  finished_ = done;
}

bool show_progress(bool asked) { return asked || ::isatty(STDERR_FILENO) != 0; }

}  // namespace shmreplay::cli
