/* cmd.c - the client commands' help, options and arguments (see cmd.h). */
#include "daemon/client/cmd.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/client/client.h"
#include "daemon/client/conn.h"
#include "daemon/shared/bytebuf.h"
#include "engine/util.h"

void cmd_usage(FILE *f, const cmd_help_t *h) {
    fprintf(f,
            "usage: nightshift %s %s [--url URL] [--token T | --token-file F]\n\n%s\n"
            "common options:\n"
            "  --url URL         the daemon (default $NIGHTSHIFT_URL, else port\n"
            "                    $NIGHTSHIFT_PORT on 127.0.0.1, else " DEFAULT_URL ")\n"
            "  --token T         bearer token for the daemon (default $NIGHTSHIFT_TOKEN)\n"
            "  --token-file F    read the token from the file F\n"
            "  --help            this text\n\n"
            "exit status: 0 ok, 1 the daemon answered with an error, 2 usage,\n"
            "3 the daemon cannot be reached\n",
            h->name, h->synopsis, h->details);
}

int cmd_usage_error(const cmd_help_t *h, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "nightshift %s: ", h->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nusage: nightshift %s %s [--url URL] [--token T | --token-file F]\n", h->name,
            h->synopsis);
    return CLIENT_EXIT_USAGE;
}

int cmd_opt_value(int argc, char **argv, int *i, const char *name, const char **val) {
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0) return 0;
    if (argv[*i][n] == '=') {
        *val = argv[*i] + n + 1;
        return 1;
    }
    if (argv[*i][n]) return 0;
    if (*i + 1 >= argc) return -1;
    *val = argv[++*i];
    return 1;
}

int cmd_common_option(int argc, char **argv, int *i, conn_opts_t *o) {
    int r;
    if (!strcmp(argv[*i], "--help") || !strcmp(argv[*i], "-h")) {
        o->help = 1;
        return 1;
    }
    if ((r = cmd_opt_value(argc, argv, i, "--url", &o->url)) != 0) return r;
    if ((r = cmd_opt_value(argc, argv, i, "--token", &o->token)) != 0) return r;
    return cmd_opt_value(argc, argv, i, "--token-file", &o->token_file);
}

int cmd_parse_args(int argc, char **argv, const cmd_help_t *h, conn_opts_t *o,
                   const cmd_opt_t *opts, cmd_args_t *args, int *rc) {
    for (int i = 1; i < argc; i++) {
        int r = cmd_common_option(argc, argv, &i, o);
        for (const cmd_opt_t *op = opts; r == 0 && op && op->name; op++) {
            if (op->value)
                r = cmd_opt_value(argc, argv, &i, op->name, op->value);
            else if (!strcmp(argv[i], op->name))
                r = *op->flag = 1;
        }
        if (r < 0) {
            *rc = cmd_usage_error(h, "%s needs a value", argv[i]);
            return 0;
        }
        if (r) continue;
        if (argv[i][0] == '-' && !(args && args->dash && !argv[i][1])) {
            *rc = cmd_usage_error(h, "unknown option %s", argv[i]);
            return 0;
        }
        if (!args || args->max == 0) {
            *rc = cmd_usage_error(h, "unexpected argument '%s'", argv[i]);
            return 0;
        }
        if (args->n == args->max) {
            *rc = cmd_usage_error(h, "%s", args->too_many);
            return 0;
        }
        args->v[args->n++] = argv[i];
    }
    *rc = 0;
    if (o->help) {
        cmd_usage(stdout, h);
        return 0;
    }
    return 1;
}

long long cmd_positive(const char *s) {
    char *end;
    errno = 0;
    long long v = s && *s >= '0' && *s <= '9' ? strtoll(s, &end, 10) : 0;
    return v > 0 && !errno && !*end ? v : -1;
}

int cmd_read_input(const char *path, size_t max, char **out, size_t *len, char *err,
                   size_t errlen) {
    int is_stdin = !strcmp(path, "-");
    const char *shown = is_stdin ? "stdin" : path;
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    char chunk[4096];
    size_t got;
    bytebuf_t b;
    bytebuf_init(&b, max);
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
        int rc = bytebuf_append(&b, chunk, got);
        if (rc == NS_ERR_TOO_LARGE) {
            snprintf(err, errlen, "%s: larger than %zu bytes", shown, max);
            goto fail;
        }
        if (rc < 0) {
            snprintf(err, errlen, "%s: out of memory", shown);
            goto fail;
        }
    }
    if (ferror(f)) {
        snprintf(err, errlen, "%s: %s", shown, strerror(errno));
        goto fail;
    }
    if (!(*out = bytebuf_take(&b, len))) {
        snprintf(err, errlen, "%s: out of memory", shown);
        goto fail;
    }
    if (!is_stdin) fclose(f);
    return 0;
fail:
    if (!is_stdin) fclose(f);
    bytebuf_free(&b);
    return -1;
}
