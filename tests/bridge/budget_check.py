#!/usr/bin/python3
"""budget_check.py - the bridge's budgets: a FLOPs budget is the token budget
it buys, asked of the daemon's POST /v1/cost (a stand-in client here); a token
and a time budget are read from the spec. Exit 0 when every check holds."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "experiments", "bridges"))
import nightshift_optuna as ns  # noqa: E402


class StandIn:
    def __init__(self, per_token):
        self.per_token, self.asked = per_token, []

    def call(self, method, path, body=None):
        self.asked.append((method, path))
        return 200, {"flops_per_token": self.per_token}


defaults = {"time_budget_s": 300, "train": {"total_batch_tokens": 4096}}
c = StandIn(2.0e6)
kind, budget, step = ns.budget_of({"flops_budget": 4.0e9, "train": {"total_batch_tokens": 512}},
                                  defaults, c)
assert (kind, budget, step) == ("tokens", 2000.0, 512), (kind, budget, step)
assert c.asked == [("POST", "/v1/cost")], c.asked
assert ns.budget_of({"token_budget": 65536}, defaults, c)[:2] == ("tokens", 65536.0)
assert ns.budget_of({}, defaults, c)[:2] == ("time", 300.0)
try:
    ns.budget_of({"flops_budget": 1e9}, defaults)
    raise SystemExit("a FLOPs budget without a daemon to ask was taken")
except ns.BridgeError:
    pass
print("budgets: ok")
