/* fuzz.h - what the libFuzzer targets share: a scratch directory and a file
 * writer for the loaders that read paths. Each target is one file
 * tests/fuzz/fuzz_NAME.c with LLVMFuzzerTestOneInput (and, when it needs a
 * fixture, LLVMFuzzerInitialize); its seeds are in tests/fuzz/corpus/NAME/.
 * A property a target checks beyond "no crash" ends in abort(), which
 * libFuzzer reports like any crash. */
#ifndef NIGHTSHIFT_FUZZ_H
#define NIGHTSHIFT_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A fresh directory for this process (on /dev/shm when there is one: the
 * loaders write and read a file per input). The string is static. */
static inline const char *fuzz_dir(void) {
    static char dir[64];
    if (dir[0]) return dir;
    snprintf(dir, sizeof dir, "%s/nightshift-fuzz-XXXXXX",
             access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    if (!mkdtemp(dir)) {
        perror("fuzz: mkdtemp");
        abort();
    }
    return dir;
}

/* Replace path with n bytes of data; aborts on failure (that is no finding). */
static inline void fuzz_write(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

/* Stop with a message: a property the target checks does not hold. */
#define FUZZ_CHECK(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz: property failed: " __VA_ARGS__);                                \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#endif
