// detail/test_hooks.cpp: the hooks of test_hooks.hpp, null until a test sets one.
#include "detail/test_hooks.hpp"

namespace shmreplay::detail::test_hooks {

std::atomic<Hook> after_reservation{nullptr};
std::atomic<Hook> in_update_section{nullptr};
std::atomic<Hook> before_repair_lease{nullptr};
std::atomic<Hook> in_dead_load_repair{nullptr};

}  // namespace shmreplay::detail::test_hooks
