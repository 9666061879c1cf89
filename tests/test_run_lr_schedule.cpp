// LR schedules (run/lr_schedule.h) against Hugging Face's formulas worked by hand, and the
// schedule the options give.
#include <catch2/catch.hpp>

#include <cmath>

#include "eagle/config/options.h"
#include "eagle/run/lr_schedule.h"

using namespace eagle::run;
using eagle::config::LrScheduler;

TEST_CASE("cosine with warmup: Hugging Face get_cosine_schedule_with_warmup", "[run]") {
  // lr 1e-3, warmup 2, total 10. Warmup: step/2. Then progress p = (step-2)/8 and
  // 0.5*(1+cos(pi*p)): p=0 -> 1, p=1/8 -> 0.5*(1+0.9238795) = 0.96193977, p=1/2 -> 0.5,
  // p=3/4 -> 0.5*(1-0.70710678) = 0.14644661, p=1 -> 0. HF does not clamp p, so past the end
  // the factor rises again (checked below; the loop never goes there).
  LrSchedule s{LrScheduler::cosine, 1e-3, 2, 10};
  CHECK(s.multiplier(0) == 0.0);
  CHECK(s.multiplier(1) == 0.5);
  CHECK(s.multiplier(2) == 1.0);
  CHECK(s.multiplier(3) == Approx(0.9619397662556434).epsilon(1e-15));
  CHECK(s.multiplier(6) == Approx(0.5).epsilon(1e-15));
  CHECK(s.multiplier(8) == Approx(0.14644660940672627).epsilon(1e-15));
  CHECK(std::abs(s.multiplier(10)) < 1e-16);
  // p = 10/8: 0.5*(1+cos(1.25 pi)) = 0.5*(1-0.70710678) = 0.14644661 (HF does not clamp the phase).
  CHECK(s.multiplier(12) == Approx(0.14644660940672627).epsilon(1e-14));
  CHECK(s.lr(1) == 5e-4);
  CHECK(s.lr(8) == Approx(1.4644660940672627e-4).epsilon(1e-14));
}

TEST_CASE("linear with warmup: Hugging Face get_linear_schedule_with_warmup", "[run]") {
  // warmup 4, total 12: warmup step/4, then (12-step)/8, floored at 0.
  LrSchedule s{LrScheduler::linear, 2e-4, 4, 12};
  CHECK(s.multiplier(0) == 0.0);
  CHECK(s.multiplier(3) == 0.75);
  CHECK(s.multiplier(4) == 1.0);
  CHECK(s.multiplier(5) == 0.875);
  CHECK(s.multiplier(10) == 0.25);
  CHECK(s.multiplier(12) == 0.0);
  CHECK(s.multiplier(20) == 0.0);
  CHECK(s.lr(5) == 2e-4 * 0.875);
}

TEST_CASE("constant with warmup and the degenerate cases", "[run]") {
  LrSchedule c{LrScheduler::constant, 1e-4, 3, 10};
  CHECK(c.multiplier(0) == 0.0);
  CHECK(c.multiplier(2) == 2.0 / 3.0);
  CHECK(c.multiplier(3) == 1.0);
  CHECK(c.multiplier(1000) == 1.0);
  // No warmup: full rate from the first step (HF: max(1, 0) = 1 in the denominators).
  LrSchedule n{LrScheduler::cosine, 1e-4, 0, 4};
  CHECK(n.multiplier(0) == 1.0);
  CHECK(n.multiplier(2) == Approx(0.5).epsilon(1e-15));
  // Warmup longer than the run: the linear tail divides by max(1, total - warmup) = 1.
  LrSchedule l{LrScheduler::linear, 1e-4, 8, 5};
  CHECK(l.multiplier(4) == 0.5);
  CHECK(l.multiplier(8) == 0.0);
  eagle::config::Options o;
  o.learning_rate = 3e-4;
  o.warmup_steps = 7;
  o.lr_scheduler_type = LrScheduler::linear;
  LrSchedule m = make_lr_schedule(o, 70);
  CHECK(m.type == LrScheduler::linear);
  CHECK(m.peak_lr == 3e-4);
  CHECK(m.warmup_steps == 7);
  CHECK(m.total_steps == 70);
}
