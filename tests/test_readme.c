/* test_readme.c - the READMEs point at what exists (tests/readme_check.py):
 * every relative link of every README resolves (a #anchor to a heading of the
 * file it names), every `make TARGET` they show is a target of the Makefile,
 * and every `nightshift COMMAND` they show answers `COMMAND --help`. */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "tests/testutil.h"

#define PY       "/usr/bin/python3"
#define SCRIPT_S 60.0 /* hard limit of the script */

TestSuite(readme, .timeout = 90);

Test(readme, links_make_targets_and_commands_exist) {
    char *script = tu_path("%s/tests/readme_check.py", tu_src());
    char *const argv[] = {PY, script, "--src", (char *)tu_src(), "--bin", (char *)tu_bin(), NULL};
    tu_run_t r;
    tu_run(&r, argv, SCRIPT_S);
    cr_assert(!r.timed_out, "tests/readme_check.py ran past %.0f s:\n%s\n%s", SCRIPT_S, r.out,
              r.err);
    cr_expect_eq(r.exit_code, 0, "the READMEs point at what does not exist:\n%s\n%s", r.out, r.err);
    cr_expect(strstr(r.out, "all checks passed") != NULL, "%s", r.out);
    tu_run_free(&r);
    free(script);
}
