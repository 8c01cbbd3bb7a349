#!/usr/bin/python3
"""user_study.py - an Optuna user's own script over nightshift_optuna, for
tests/test_bridge.c: their study in a SQLite storage (as optuna-dashboard
opens it), their TPE sampler with the library's constraints, their pruner.

    user_study.py run URL TOKEN SPACE BASE STORAGE N   N runs more in the study
    user_study.py read STORAGE                         the study as Optuna reads it
                                                       back, as JSON on stdout
"""
import json
import os
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "experiments", "bridges"))
import optuna  # noqa: E402
import nightshift_optuna as ns  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

if sys.argv[1] == "run":
    url, token, space_path, base_path, storage, n = sys.argv[2:8]
    base = json.load(open(base_path))
    objective = ns.Objective(url, token=token, space=ns.load_space(space_path, base=base),
                             base=base, poll=0.1)
    study = optuna.create_study(
        study_name="user", storage=storage, load_if_exists=True, direction="minimize",
        sampler=optuna.samplers.TPESampler(seed=int(n) + 3,
                                           n_startup_trials=2, constraints_func=ns.constraints),
        pruner=optuna.pruners.MedianPruner())
    study.optimize(objective, n_trials=200, callbacks=[objective.stop_after(int(n))])
    print(json.dumps(ns.best(study)))
else:
    study = optuna.load_study(study_name="user", storage=sys.argv[2])
    trials = [{"number": t.number, "state": t.state.name,
               "value": t.value,
               "params": t.params, "user_attrs": t.user_attrs} for t in study.trials]
    bt = study.best_trial
    print(json.dumps({"trials": trials, "best": {"number": bt.number, "value": bt.value},
                      "library_best": ns.best(study)}))
