/* test_search_py.c - the search benchmark's Python side (experiments/search:
 * space.py, surrogate.py, replay.py) through tests/search_py.py, as a user
 * runs it: /usr/bin/python3 with the nightshift binary.
 *
 * It needs no numpy, sklearn, Optuna or landscape: the space file's
 * semantics on a tiny space (conditional axes, the derived micro-batch, the
 * encoding), the engine's refusals as space.py mirrors them against
 * `nightshift cost`, and a replay of the real agent's nights on a stand-in
 * surrogate that is the same for the same seed. The parts that need Optuna or
 * sklearn print SKIP with the reason when they are missing. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/testutil.h"

#define PY       "/usr/bin/python3"
#define SCRIPT_S 200.0 /* hard limit of the script */

TestSuite(search_py, .init = tu_dir_init, .fini = tu_dir_fini, .timeout = 240);

Test(search_py, space_semantics_refusals_and_a_deterministic_replay) {
    char *script = tu_path("%s/tests/search_py.py", tu_src());
    char *work = tu_path("%s/work", tu_dir());
    char *const argv[] = {PY, script, "--bin", (char *)tu_bin(), "--work", work, NULL};
    tu_run_t r;
    tu_run(&r, argv, SCRIPT_S);
    cr_assert(!r.timed_out, "tests/search_py.py ran past %.0f s:\n%s\n%s", SCRIPT_S, r.out, r.err);
    for (const char *p = r.out; (p = strstr(p, "SKIP: ")); p++) {
        const char *end = strchr(p, '\n');
        cr_log_info("%.*s", end ? (int)(end - p) : (int)strlen(p), p);
    }
    cr_expect_eq(r.exit_code, 0, "tests/search_py.py failed:\n%s\n%s", r.out, r.err);
    cr_expect(strstr(r.out, "all checks passed") != NULL, "%s", r.out);
    tu_run_free(&r);
    free(work);
    free(script);
}
