/* cmd.h - the skeleton every client command shares: its help text, the
 * common options (--url, --token, --token-file, --help), its own options and
 * arguments, usage errors, and reading a file or stdin with a size cap. */
#ifndef NIGHTSHIFT_CLIENT_CMD_H
#define NIGHTSHIFT_CLIENT_CMD_H

#include <stddef.h>
#include <stdio.h>

typedef struct {
    const char *name;     /* the subcommand, "submit" */
    const char *synopsis; /* its arguments, "FILE|- [--force]" */
    const char *details;  /* what it does and its own options, one per line */
} cmd_help_t;

typedef struct {
    const char *url, *token, *token_file; /* borrowed from argv; NULL = not given */
    int help;
} conn_opts_t;

/* One option of a command besides the common ones: with value set it takes
 * a value ("--limit N" or "--limit=N"), stored there; with flag set it is a
 * flag ("--json"), and *flag becomes 1. A list of them ends with {0}. */
typedef struct {
    const char *name;
    const char **value;
    int *flag;
} cmd_opt_t;

/* The arguments of a command that are not options. */
typedef struct {
    const char **v;       /* they go here, at most max of them */
    int max;              /* 0: none is accepted ("unexpected argument") */
    const char *too_many; /* the usage message past max */
    int dash;             /* a lone "-" is one (stdin), not an option */
    int n;                /* how many were given */
} cmd_args_t;

/* The end of the help of a command that may answer without the daemon
 * (conn_t.offline_ok). */
#define CMD_OFFLINE_HELP                                                                           \
    "\nWith no daemon answering on loopback, the answer comes from the state\n"                    \
    "directory's database ($NIGHTSHIFT_DIR, else ./state), opened read-only,\n"                    \
    "and stderr says so.\n"

/* The usage text of a command, with the common options, on f. */
void cmd_usage(FILE *f, const cmd_help_t *h);

/* Print "nightshift NAME: <message>" and the synopsis on stderr; returns
 * CLIENT_EXIT_USAGE. */
int cmd_usage_error(const cmd_help_t *h, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* argv[*i] is "NAME VALUE" or "NAME=VALUE": 1 with *val set (advancing *i past
 * a separate value), -1 when the value is missing, 0 for any other argument. */
int cmd_opt_value(int argc, char **argv, int *i, const char *name, const char **val);

/* The options every command takes: 1 if argv[*i] was one (consumed), 0 if
 * not, -1 when its value is missing. */
int cmd_common_option(int argc, char **argv, int *i, conn_opts_t *o);

/* Parse a command's argv[1..]: the common options into o, the command's own
 * opts (may be NULL), and the other arguments into args (NULL when it takes
 * none). Returns 1 when the command should run (*rc 0), or 0 with *rc its
 * exit code: --help was given (0, the usage printed), or a usage error
 * (printed). */
int cmd_parse_args(int argc, char **argv, const cmd_help_t *h, conn_opts_t *o,
                   const cmd_opt_t *opts, cmd_args_t *args, int *rc);

/* A positive integer argument (an experiment id, a limit); -1 if it is not. */
long long cmd_positive(const char *s);

/* Read all of path ("-" = stdin), at most max bytes, into *out (malloc'd,
 * NUL-terminated, owned by the caller). Returns 0, or -1 with err set. */
int cmd_read_input(const char *path, size_t max, char **out, size_t *len, char *err, size_t errlen);

#endif
