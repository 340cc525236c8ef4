// InterruptCheck (shmreplay/wait.hpp): one pointer per thread to the innermost live check.
#include "shmreplay/wait.hpp"

namespace shmreplay {

namespace {
thread_local InterruptCheck* t_innermost = nullptr;
}  // namespace

InterruptCheck::InterruptCheck(Function check, void* context) noexcept
    : check_(check), context_(context), outer_(t_innermost) {
  t_innermost = this;
}

InterruptCheck::~InterruptCheck() { t_innermost = outer_; }

void InterruptCheck::run() {
  if (const InterruptCheck* c = t_innermost; c != nullptr && c->check_ != nullptr) c->check_(c->context_);
}

}  // namespace shmreplay
