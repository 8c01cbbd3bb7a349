/* opts.h - a program's options as a table: one row per option (name, type,
 * default, bounds, help) drives the command-line parser, the --config file
 * and the --help text, so an option is spelled once. `nightshift serve`
 * (daemon/serve/serve.c) and `nightshift agent` (experiments/agent/agent.c)
 * are tables of these rows.
 *
 * Values land in the caller's options struct at each row's offset. One
 * convention for every option: 0 means none (no limit, off) wherever none
 * is a value the option can take, and OPT_AUTO (-1) is a default that the
 * program works out when it starts (the help says how); OPT_AUTO is never
 * typed, only the rows' defaults hold it.
 *
 * --config FILE is a JSON object whose keys are the long options ('-' or
 * '_'), each a string or a number; options on the command line override it.
 * Errors name the option: "slots: expected an integer in [1, 1048576], got
 * 'x'". Everything is static data and the caller's struct; nothing is
 * allocated but what a OPT_CUSTOM setter allocates. */
#ifndef NIGHTSHIFT_OPTS_H
#define NIGHTSHIFT_OPTS_H

#include <stddef.h>
#include <stdio.h>

#define OPT_AUTO (-1)

typedef enum {
    OPT_STRING, /* text of 1 to size-1 bytes into a char[size] */
    OPT_INT,    /* an int in [lo, hi] */
    OPT_INT64,  /* an int64_t in [lo, hi] (at most 2^53, as JSON numbers are exact) */
    OPT_NUM,    /* a double in [lo, hi] (OPT_LO_OPEN, OPT_HI_OPEN: the ends excluded) */
    OPT_ENUM,   /* one of names[]: its index, an int */
    OPT_CUSTOM, /* set() reads it; its default is set()'s of sdef (NULL: none) */
} opt_type;

enum {
    OPT_LO_OPEN = 1 << 0,
    OPT_HI_OPEN = 1 << 1,
    OPT_SECRET = 1 << 2, /* on the command line every user sees it (ps): warn */
};

/* A custom row's setter: read val into the options struct o. */
typedef int opt_set_fn(void *o, const char *val, char *err, size_t errlen);

typedef struct {
    const char *name; /* the long option, "slots" */
    opt_type type;
    size_t offset, size;      /* of the value in the options struct; OPT_STRING: its size */
    double lo, hi;            /* OPT_INT, OPT_INT64, OPT_NUM */
    double def;               /* the default of a number or an enum (its index), or OPT_AUTO */
    const char *sdef;         /* the default of a string or a custom row; NULL = none */
    const char *const *names; /* OPT_ENUM, NULL-terminated */
    opt_set_fn *set;          /* OPT_CUSTOM */
    int flags;
    const char *env; /* the environment variable that sets it when nothing else did */
    const char *arg; /* the value's name in the help: "N", "HOST:PORT" */
    const char *help;
} opt_t;

typedef struct {
    const char *program; /* "serve": "usage: nightshift serve ..." */
    const opt_t *rows;
    size_t n;
    const char *synopsis; /* appended to the usage line's options, or NULL */
    const char *about;    /* prose after the list of options, or NULL */
} opt_table_t;

/* Set every row's default into o (a custom row's through its setter). */
int opts_defaults(const opt_table_t *t, void *o, char *err, size_t errlen);

/* One option by name ('_' taken as '-') from text. */
int opts_set(const opt_table_t *t, void *o, const char *name, const char *val, char *err,
             size_t errlen);

/* The --config file at path into o. */
int opts_load_config(const opt_table_t *t, void *o, const char *path, char *err, size_t errlen);

/* The defaults, then --config, then the command line, then the rows'
 * environment variables for what is still unset (a string or a custom
 * row's default). argv[0] is the subcommand. Returns 0, 1 for --help, 2 for
 * a usage error (an unknown option, a missing value, an argument), or -1
 * with err for a bad value. */
int opts_parse(const opt_table_t *t, void *o, int argc, char **argv, char *err, size_t errlen);

/* The usage line; with full, the prose and one line per option with its
 * default (--help), else a pointer to --help (after a usage error). */
void opts_usage(const opt_table_t *t, FILE *out, int full);

#endif
