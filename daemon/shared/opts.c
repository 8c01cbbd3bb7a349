/* opts.c - options as a table (see opts.h): defaults, values from text, the
 * --config file, getopt_long over the rows, and the help. */
#include "daemon/shared/opts.h"

#include <assert.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/shared/http.h"
#include "daemon/shared/log.h"
#include "engine/util.h"

#define MAX_ROWS    64 /* rows of one table */
#define HELP_COLUMN 26 /* where an option's help starts */
#define WIDTH       80

#define AT(o, row, type) ((type *)((char *)(o) + (row)->offset))

static const opt_t *find(const opt_table_t *t, const char *name) {
    char key[64];
    snprintf(key, sizeof key, "%s", name);
    for (char *p = key; *p; p++)
        if (*p == '_') *p = '-';
    for (size_t i = 0; i < t->n; i++)
        if (!strcmp(t->rows[i].name, key)) return &t->rows[i];
    return NULL;
}

/* "[1, 1048576]", "(0, 1)", ... */
static void range_text(const opt_t *r, char *buf, size_t len) {
    snprintf(buf, len, "%c%.15g, %.15g%c", r->flags & OPT_LO_OPEN ? '(' : '[', r->lo, r->hi,
             r->flags & OPT_HI_OPEN ? ')' : ']');
}

/* A number of r's type and range from val. */
static int read_number(const opt_t *r, const char *val, double *out, char *err, size_t errlen) {
    char *end, range[96];
    errno = 0;
    double d = strtod(val, &end);
    int whole = r->type != OPT_NUM;
    int ok = end != val && !*end && !errno && isfinite(d) && (!whole || d == floor(d));
    ok = ok && (r->flags & OPT_LO_OPEN ? d > r->lo : d >= r->lo);
    ok = ok && (r->flags & OPT_HI_OPEN ? d < r->hi : d <= r->hi);
    if (!ok) {
        range_text(r, range, sizeof range);
        snprintf(err, errlen, "%s: expected %s in %s, got '%s'", r->name,
                 whole ? "an integer" : "a number", range, val);
        return -1;
    }
    *out = d;
    return 0;
}

/* An enum's names as "a, b or c". */
static void names_text(const opt_t *r, char *buf, size_t len) {
    size_t used = 0;
    buf[0] = '\0';
    for (int k = 0; r->names[k] && used < len; k++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s",
                                 k == 0            ? ""
                                 : r->names[k + 1] ? ", "
                                                   : " or ",
                                 r->names[k]);
}

static int set_row(const opt_t *r, void *o, const char *val, char *err, size_t errlen) {
    char range[96];
    double d;
    switch (r->type) {
    case OPT_STRING:
        if (!*val || strlen(val) >= r->size) {
            snprintf(err, errlen, "%s: 1 to %zu characters", r->name, r->size - 1);
            return -1;
        }
        snprintf(AT(o, r, char), r->size, "%s", val);
        return 0;
    case OPT_INT:
    case OPT_INT64:
    case OPT_NUM:
        if (read_number(r, val, &d, err, errlen) < 0) return -1;
        if (r->type == OPT_INT)
            *AT(o, r, int) = (int)d;
        else if (r->type == OPT_INT64)
            *AT(o, r, int64_t) = (int64_t)d;
        else
            *AT(o, r, double) = d;
        return 0;
    case OPT_ENUM:
        for (int k = 0; r->names[k]; k++)
            if (!strcmp(val, r->names[k])) {
                *AT(o, r, int) = k;
                return 0;
            }
        names_text(r, range, sizeof range);
        snprintf(err, errlen, "%s: expected %s, got '%s'", r->name, range, val);
        return -1;
    case OPT_CUSTOM:
        return r->set(o, val, err, errlen);
    }
    return -1;
}

int opts_set(const opt_table_t *t, void *o, const char *name, const char *val, char *err,
             size_t errlen) {
    const opt_t *r = find(t, name);
    if (!r) {
        snprintf(err, errlen, "unknown option '%s'", name);
        return -1;
    }
    return set_row(r, o, val, err, errlen);
}

int opts_defaults(const opt_table_t *t, void *o, char *err, size_t errlen) {
    assert(t->n <= MAX_ROWS);
    for (size_t i = 0; i < t->n; i++) {
        const opt_t *r = &t->rows[i];
        switch (r->type) {
        case OPT_STRING:
            snprintf(AT(o, r, char), r->size, "%s", r->sdef ? r->sdef : "");
            break;
        case OPT_INT:
        case OPT_ENUM:
            *AT(o, r, int) = (int)r->def;
            break;
        case OPT_INT64:
            *AT(o, r, int64_t) = (int64_t)r->def;
            break;
        case OPT_NUM:
            *AT(o, r, double) = r->def;
            break;
        case OPT_CUSTOM:
            if (r->sdef && r->set(o, r->sdef, err, errlen) < 0) return -1;
            break;
        }
    }
    return 0;
}

int opts_load_config(const opt_table_t *t, void *o, const char *path, char *err, size_t errlen) {
    size_t len;
    char e2[256];
    char *text = util_read_file(path, 1 << 20, &len, e2, sizeof e2);
    if (!text) {
        snprintf(err, errlen, "--config %s", e2);
        return -1;
    }
    cJSON *root = http_json_parse(text, len, e2, sizeof e2);
    free(text);
    if (!cJSON_IsObject(root)) {
        snprintf(err, errlen, "%s: %s", path, root ? "not a JSON object" : e2);
        cJSON_Delete(root);
        return -1;
    }
    int rc = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, root) {
        char val[1024];
        if (cJSON_IsString(item)) {
            snprintf(val, sizeof val, "%s", item->valuestring);
        } else if (cJSON_IsNumber(item)) {
            snprintf(val, sizeof val, "%.17g", item->valuedouble);
        } else {
            snprintf(err, errlen, "%s: %s: expected a string or a number", path, item->string);
            rc = -1;
            break;
        }
        if (opts_set(t, o, item->string, val, e2, sizeof e2) < 0) {
            snprintf(err, errlen, "%s: %s", path, e2);
            rc = -1;
            break;
        }
    }
    cJSON_Delete(root);
    return rc;
}

int opts_parse(const opt_table_t *t, void *o, int argc, char **argv, char *err, size_t errlen) {
    struct option lo[MAX_ROWS + 3];
    size_t n = 0;
    assert(t->n <= MAX_ROWS);
    for (; n < t->n; n++) lo[n] = (struct option){t->rows[n].name, required_argument, 0, 0};
    lo[n++] = (struct option){"config", required_argument, 0, 'c'};
    lo[n++] = (struct option){"help", no_argument, 0, 'h'};
    lo[n] = (struct option){0, 0, 0, 0};
    if (opts_defaults(t, o, err, errlen) < 0) return -1;
    /* First pass: the config file, so that options given on the line win. */
    int ch, idx;
    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "", lo, &idx)) != -1)
        if (ch == 'c' && opts_load_config(t, o, optarg, err, errlen) < 0) return -1;
    optind = 1;
    opterr = 1;
    while ((ch = getopt_long(argc, argv, "", lo, &idx)) != -1) {
        if (ch == 'h') return 1;
        if (ch == '?') return 2;
        if (ch != 0) continue;
        const opt_t *r = &t->rows[idx];
        if (set_row(r, o, optarg, err, errlen) < 0) return -1;
        if (r->flags & OPT_SECRET)
            log_warn("--%s puts the secret on the command line, where every user sees it (ps); "
                     "use --%s-file%s%s",
                     r->name, r->name, r->env ? " or $" : "", r->env ? r->env : "");
    }
    if (optind != argc) return 2;
    for (size_t i = 0; i < t->n; i++) {
        const opt_t *r = &t->rows[i];
        const char *env = r->env ? getenv(r->env) : NULL;
        if (r->type == OPT_STRING && env && *env && !*AT(o, r, char) &&
            set_row(r, o, env, err, errlen) < 0)
            return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------- help */

/* Append word to out after a space, or on a new line indented by indent
 * when it would pass WIDTH; *col is the current column (indent: at the
 * start of a line). */
static void put_word(FILE *out, const char *word, size_t w, int indent, int *col) {
    if (*col > indent && *col + 1 + (int)w > WIDTH) {
        fprintf(out, "\n%*s", indent, "");
        *col = indent;
    } else if (*col > indent) {
        fputc(' ', out);
        (*col)++;
    }
    fprintf(out, "%.*s", (int)w, word);
    *col += (int)w;
}

/* The words of text, wrapped as put_word does. */
static void wrap(FILE *out, const char *text, int indent, int *col) {
    for (const char *p = text + strspn(text, " "); *p; p += strspn(p, " ")) {
        size_t w = strcspn(p, " ");
        put_word(out, p, w, indent, col);
        p += w;
    }
}

/* " (default: X)" of r into buf, or "" when the help says it. */
static void default_text(const opt_t *r, char *buf, size_t len) {
    buf[0] = '\0';
    if ((r->type == OPT_STRING || r->type == OPT_CUSTOM) && r->sdef)
        snprintf(buf, len, "(default %s)", r->sdef);
    else if (r->type == OPT_ENUM)
        snprintf(buf, len, "(default %s)", r->names[(int)r->def]);
    else if ((r->type == OPT_INT || r->type == OPT_INT64 || r->type == OPT_NUM) &&
             r->def != OPT_AUTO)
        snprintf(buf, len, "(default %.15g)", r->def);
}

void opts_usage(const opt_table_t *t, FILE *out, int full) {
    char word[128], def[128];
    int indent = fprintf(out, "usage: nightshift %s ", t->program), col = indent;
    for (size_t i = 0; i < t->n; i++) {
        int w = snprintf(word, sizeof word, "[--%s %s]", t->rows[i].name, t->rows[i].arg);
        put_word(out, word, (size_t)w, indent, &col);
    }
    put_word(out, "[--config FILE]", 15, indent, &col);
    if (t->synopsis) wrap(out, t->synopsis, indent, &col);
    fputc('\n', out);
    if (!full) {
        fprintf(out, "nightshift %s --help explains every option.\n", t->program);
        return;
    }
    if (t->about) fputs(t->about, out);
    fputs("Options (also the keys of --config FILE, a JSON object; the command line wins):\n", out);
    for (size_t i = 0; i < t->n; i++) {
        const opt_t *r = &t->rows[i];
        col = fprintf(out, "  --%s %s", r->name, r->arg);
        if (col >= HELP_COLUMN)
            col = fprintf(out, "\n%*s", HELP_COLUMN, "") - 1;
        else
            col += fprintf(out, "%*s", HELP_COLUMN - col, "");
        wrap(out, r->help, HELP_COLUMN, &col);
        default_text(r, def, sizeof def);
        if (def[0]) wrap(out, def, HELP_COLUMN, &col);
        fputc('\n', out);
    }
}
