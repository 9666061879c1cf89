"""Shared pieces of the peer drivers of scripts/bench/real_target.sh (issue 52).

The drivers train a peer's draft for BUDGET_S seconds of wall time measured from RT_T0 (the launch time the runner
took before starting the interpreter, so imports and model loading count, as eagle-train's start-up does) and save
a head at each mark k * BUDGET_S / SAVES, k = 1 .. SAVES (the last one at the budget). Each save appends
{"dir", "wall_s", "step", "real_tokens"} to OUT/saves.jsonl; real_tokens counts the non-padding tokens of the
batches trained so far (what eagle-train's trainer_state.json counts).
"""
import json
import os
import time


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


class Clock:
    def __init__(self, out, budget_s=None, saves=None):
        self.t0 = float(os.environ.get("RT_T0", time.time()))
        self.budget = float(budget_s if budget_s is not None else os.environ.get("BUDGET_S", 1200))
        self.saves = int(saves if saves is not None else os.environ.get("SAVES", 6))
        self.out = out
        self.next_mark = 1
        os.makedirs(os.path.join(out, "heads"), exist_ok=True)
        open(os.path.join(out, "saves.jsonl"), "w").close()

    def wall(self):
        return time.time() - self.t0

    def passed(self, wall):
        """True when the next save mark lies at or before `wall`."""
        return self.next_mark <= self.saves and wall >= self.next_mark * self.budget / self.saves

    def due(self):
        """True when the next save mark has passed."""
        return self.passed(self.wall())

    def done(self):
        return self.next_mark > self.saves

    def record(self, save_fn, step, real_tokens):
        """Saves through save_fn(dir) and records it; skips the marks already passed (one save covers them)."""
        d = os.path.join(self.out, "heads", f"step-{step}")
        save_fn(d)
        wall = self.wall()
        with open(os.path.join(self.out, "saves.jsonl"), "a") as f:
            f.write(json.dumps({"dir": d, "wall_s": round(wall, 3), "step": step, "real_tokens": int(real_tokens)})
                    + "\n")
        while self.passed(wall):
            self.next_mark += 1
        print(f"saved {d} at {wall:.1f} s (step {step}, {real_tokens} real tokens, "
              f"{real_tokens / max(wall, 1e-9):.1f} tokens/s)", flush=True)
