/* fuzz.h - what the libFuzzer targets share: a scratch directory and a file
 * writer for the loaders that read paths. Each target is one file
 * tests/fuzz/fuzz_NAME.c with LLVMFuzzerTestOneInput (and, when it needs a
 * fixture, LLVMFuzzerInitialize); its seeds are in tests/fuzz/corpus/NAME/.
 * A property a target checks beyond "no crash" ends in abort(), which
 * libFuzzer reports like any crash. */
#ifndef NIGHTSHIFT_FUZZ_H
#define NIGHTSHIFT_FUZZ_H

#include <ftw.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fuzz_dir_path[64];

static inline int fuzz_remove_cb(const char *path, const struct stat *st, int flag,
                                 struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

static inline void fuzz_dir_remove(void) {
    nftw(fuzz_dir_path, fuzz_remove_cb, 16, FTW_DEPTH | FTW_PHYS);
}

/* A fresh directory for this process (on /dev/shm when there is one: the
 * loaders write and read a file per input), removed at exit. The string is
 * static. */
static inline const char *fuzz_dir(void) {
    char *dir = fuzz_dir_path;
    if (dir[0]) return dir;
    snprintf(dir, sizeof fuzz_dir_path, "%s/nightshift-fuzz-XXXXXX",
             access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    if (!mkdtemp(dir)) {
        perror("fuzz: mkdtemp");
        abort();
    }
    atexit(fuzz_dir_remove);
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
