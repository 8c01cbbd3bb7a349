/* jsonpath.h - reading a JSON tree (cJSON) by a dotted path of object keys,
 * "best.test.test_bpb": the client reads the daemon's replies this way, and
 * the daemon its report when it writes it out. */
#ifndef NIGHTSHIFT_JSONPATH_H
#define NIGHTSHIFT_JSONPATH_H

#include <cjson/cJSON.h>

/* o["a"]["b"] for path "a.b" (keys of at most 63 bytes); NULL when a step is
 * missing or not an object. Borrowed from o. */
const cJSON *jsonpath_get(const cJSON *o, const char *path);

/* The number at path, or dflt when it is missing or not a number. */
double jsonpath_num(const cJSON *o, const char *path, double dflt);

/* The string at path, borrowed from o; NULL when missing or not a string. */
const char *jsonpath_str(const cJSON *o, const char *path);

#endif
