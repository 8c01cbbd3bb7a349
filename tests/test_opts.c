/* test_opts.c - options as a table (daemon/shared/opts.c): defaults, the
 * command line, --config (keys with '-' or '_'; the command line wins), the
 * environment, bounds and their messages, and a help that names every row
 * with its default. */
#include <criterion/criterion.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/shared/opts.h"
#include "tests/testutil.h"

typedef struct {
    char name[8];
    int count, level, limit;
    int64_t big;
    double frac;
    char word[16];
    int customs;
} demo_t;

static int set_word(void *o, const char *val, char *err, size_t errlen) {
    demo_t *d = o;
    if (strchr(val, ' ')) {
        snprintf(err, errlen, "word: one word, got '%s'", val);
        return -1;
    }
    snprintf(d->word, sizeof d->word, "%s", val);
    d->customs++;
    return 0;
}

static const char *const levels[] = {"low", "mid", "high", NULL};

static const opt_t rows[] = {
    {"name", OPT_STRING, .offset = offsetof(demo_t, name), .size = 8, .env = "TEST_OPTS_NAME",
     .arg = "S", .help = "a short name"},
    {"count", OPT_INT, .offset = offsetof(demo_t, count), .lo = 1, .hi = 10, .def = 3, .arg = "N",
     .help = "how many"},
    {"level", OPT_ENUM, .offset = offsetof(demo_t, level), .names = levels, .def = 1,
     .arg = "low|mid|high", .help = "how much"},
    {"limit", OPT_INT, .offset = offsetof(demo_t, limit), .lo = 0, .hi = 100, .def = OPT_AUTO,
     .arg = "N", .help = "a limit; 0 = none (default worked out at start)"},
    {"big-number", OPT_INT64, .offset = offsetof(demo_t, big), .lo = 0, .hi = 9007199254740991.0,
     .def = 7, .arg = "N", .help = "a large integer"},
    {"frac", OPT_NUM, .offset = offsetof(demo_t, frac), .lo = 0, .hi = 1,
     .flags = OPT_LO_OPEN | OPT_HI_OPEN, .def = 0.5, .arg = "F", .help = "a fraction"},
    {"word", OPT_CUSTOM, .set = set_word, .sdef = "hello", .arg = "W", .help = "one word"},
};

static const opt_table_t table = {
    .program = "demo", .rows = rows, .n = sizeof rows / sizeof rows[0], .about = "About.\n"};

TestSuite(opts, .init = tu_dir_init, .fini = tu_dir_fini, .timeout = 10);

static int parse(demo_t *d, char *err, size_t errlen, const char *const *args) {
    char *argv[16] = {"demo"};
    int n = 1;
    while (args[n - 1]) argv[n] = (char *)args[n - 1], n++;
    memset(d, 0x55, sizeof *d);
    return opts_parse(&table, d, n, argv, err, errlen);
}

Test(opts, defaults_then_config_then_the_command_line) {
    demo_t d;
    char err[256] = "", config[512];
    unsetenv("TEST_OPTS_NAME");
    cr_assert_eq(parse(&d, err, sizeof err, (const char *[]){NULL}), 0, "%s", err);
    cr_expect_str_eq(d.name, "");
    cr_expect_eq(d.count, 3);
    cr_expect_eq(d.level, 1);
    cr_expect_eq(d.limit, OPT_AUTO);
    cr_expect_eq(d.big, 7);
    cr_expect_float_eq(d.frac, 0.5, 0);
    cr_expect_str_eq(d.word, "hello", "a custom row's default goes through its setter");

    snprintf(config, sizeof config, "%s", tu_dir_path("c.json"));
    tu_write(config, "{\"count\": 9, \"big_number\": 9007199254740991, \"level\": \"high\","
                     " \"word\": \"cfg\", \"limit\": 0}");
    cr_assert_eq(
        parse(&d, err, sizeof err,
              (const char *[]){"--count", "2", "--config", config, "--frac", "0.25", NULL}),
        0, "%s", err);
    cr_expect_eq(d.count, 2, "the command line wins, wherever --config stands");
    cr_expect_eq(d.big, 9007199254740991LL, "a key with '_' is the option with '-'");
    cr_expect_eq(d.level, 2);
    cr_expect_eq(d.limit, 0);
    cr_expect_str_eq(d.word, "cfg");
    cr_expect_float_eq(d.frac, 0.25, 0);

    setenv("TEST_OPTS_NAME", "envy", 1);
    cr_assert_eq(parse(&d, err, sizeof err, (const char *[]){NULL}), 0, "%s", err);
    cr_expect_str_eq(d.name, "envy", "the environment fills what nothing else set");
    cr_assert_eq(parse(&d, err, sizeof err, (const char *[]){"--name", "line", NULL}), 0);
    cr_expect_str_eq(d.name, "line");
    unsetenv("TEST_OPTS_NAME");
}

Test(opts, bad_values_name_the_option_and_its_bounds) {
    static const struct {
        const char *args[3];
        const char *err;
    } cases[] = {
        {{"--count", "0"}, "count: expected an integer in [1, 10], got '0'"},
        {{"--count", "2.5"}, "count: expected an integer in [1, 10], got '2.5'"},
        {{"--count", "3x"}, "count: expected an integer in [1, 10], got '3x'"},
        {{"--limit", "-1"}, "limit: expected an integer in [0, 100], got '-1'"},
        {{"--frac", "1"}, "frac: expected a number in (0, 1), got '1'"},
        {{"--frac", "0"}, "frac: expected a number in (0, 1), got '0'"},
        {{"--frac", "nan"}, "frac: expected a number in (0, 1), got 'nan'"},
        {{"--level", "max"}, "level: expected low, mid or high, got 'max'"},
        {{"--name", "too-long-a-name"}, "name: 1 to 7 characters"},
        {{"--name", ""}, "name: 1 to 7 characters"},
        {{"--word", "two words"}, "word: one word, got 'two words'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        demo_t d;
        char err[256] = "";
        cr_expect_eq(parse(&d, err, sizeof err, cases[i].args), -1, "case %zu", i);
        cr_expect_str_eq(err, cases[i].err);
    }
    demo_t d;
    char err[256] = "";
    cr_expect_eq(parse(&d, err, sizeof err, (const char *[]){"--help", NULL}), 1);
    /* usage errors go to stderr: kept out of make test's output, and checked */
    tu_stderr_begin();
    cr_expect_eq(parse(&d, err, sizeof err, (const char *[]){"--bogus", "1", NULL}), 2);
    cr_expect_eq(parse(&d, err, sizeof err, (const char *[]){"extra", NULL}), 2);
    cr_expect_eq(parse(&d, err, sizeof err, (const char *[]){"--count", NULL}), 2);
    char *said = tu_stderr_end();
    cr_expect(strstr(said, "demo: unrecognized option '--bogus'"), "%s", said);
    cr_expect(strstr(said, "demo: option '--count' requires an argument"), "%s", said);
    free(said);

    const char *config = tu_dir_path("bad.json");
    tu_write(config, "{\"count\": 11}");
    cr_expect_eq(parse(&d, err, sizeof err, (const char *[]){"--config", config, NULL}), -1);
    cr_expect(strstr(err, "bad.json: count: expected an integer in [1, 10], got '11'"), "%s", err);
    tu_write(config, "{\"cuont\": 1}");
    cr_expect_eq(parse(&d, err, sizeof err, (const char *[]){"--config", config, NULL}), -1);
    cr_expect(strstr(err, "bad.json: unknown option 'cuont'"), "%s", err);
    tu_write(config, "{\"count\": [1]}");
    cr_expect_eq(parse(&d, err, sizeof err, (const char *[]){"--config", config, NULL}), -1);
    cr_expect(strstr(err, "bad.json: count: expected a string or a number"), "%s", err);
    tu_write(config, "[1]");
    cr_expect_eq(parse(&d, err, sizeof err, (const char *[]){"--config", config, NULL}), -1);
    cr_expect(strstr(err, "bad.json: not a JSON object"), "%s", err);
}

Test(opts, the_help_names_every_row_with_its_default) {
    const char *path = tu_dir_path("help.txt");
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    opts_usage(&table, f, 1);
    fclose(f);
    char *help = tu_read(path);
    cr_assert_not_null(help);
    cr_expect_eq(strncmp(help, "usage: nightshift demo [--name S] [--count N]", 45), 0, "%s", help);
    cr_expect(strstr(help, "About.\n"), "%s", help);
    static const char *const want[] = {
        "  --count N", "(default 3)", "--level low|mid|high", "(default mid)",   "--big-number N",
        "(default 7)", "--frac F",    "(default 0.5)",        "(default hello)", "[--config FILE]"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_expect(strstr(help, want[i]), "'%s' missing from:\n%s", want[i], help);
    cr_expect_null(strstr(help, "(default -1)"), "a default worked out at start is not -1");
    for (char *line = help; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : 0)
        cr_expect_leq(strcspn(line, "\n"), 80, "a line over 80 columns: %.*s",
                      (int)strcspn(line, "\n"), line);
    free(help);
}
