#include "stacks_helpers.hpp"
