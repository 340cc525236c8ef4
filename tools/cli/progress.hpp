// A progress bar on stderr for the commands that move many bytes (create's populate, save, load). Who calls it:
// the command functions, from the one thread that does the work.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace shmreplay::cli {

/// Draws progress on stderr: on a terminal one line redrawn at most every 100 ms; otherwise a line at every tenth
/// of the way, for logs. Each phase ends with one 100% report. Disabled, it draws nothing.
class ProgressBar {
 public:
  ProgressBar(bool enabled, std::string subject);
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;
  ~ProgressBar();  ///< ends an open line, so that an error follows on its own line

  void operator()(std::string_view phase, uint64_t done_bytes, uint64_t total_bytes);

 private:
  bool enabled_;
  bool tty_;
  std::string subject_;
  std::string phase_;
  bool open_line_ = false;
  bool finished_ = false;
  int last_tenth_ = -1;
  std::chrono::steady_clock::time_point last_draw_{};
};

/// Whether to show a progress bar: when asked (--progress) or when stderr is a terminal.
bool show_progress(bool asked);

}  // namespace shmreplay::cli
