// Reference arithmetic as torch computes it, for tests that check kernels
// against torch's semantics. Depends on nothing in kiln.
#pragma once

#include <cmath>

namespace kiln::testing {

/// c10::div_floor_floating: torch's floor division of floats.
template <typename Float> Float torchFloorDivide(Float a, Float b) {
  if (b == 0)
    return a / b;
  Float mod = std::fmod(a, b);
  Float div = (a - mod) / b;
  if (mod != 0 && (b < 0) != (mod < 0))
    div -= 1;
  if (div == 0)
    return std::copysign(Float(0), a / b);
  Float floored = std::floor(div);
  return div - floored > Float(0.5) ? floored + 1 : floored;
}

} // namespace kiln::testing
