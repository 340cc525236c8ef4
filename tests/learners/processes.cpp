// Several learner processes on one buffer, SIGKILLed at random, beside writers (issue 34's torture, limiter and
// update tests): being written.
#include <doctest/doctest.h>

#include "learners/learners_helpers.hpp"
