// The draws of several learners together follow one learner's distribution, and ranks draw independently.
#include <doctest/doctest.h>

#include "learners/learners_helpers.hpp"
