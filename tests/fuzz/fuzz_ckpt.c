/* fuzz_ckpt.c - the safetensors reader (engine/ckpt.c, ckpt_read). Whatever
 * it accepts must describe tensors inside the file: every tensor's data lies
 * within the buffer it read. */
#include "engine/ckpt.h"
#include "tests/fuzz/fuzz.h"

static volatile float sink; /* keeps the reads of every value */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[128];
    char err[256];
    if (!path[0]) snprintf(path, sizeof path, "%s/model.safetensors", fuzz_dir());
    fuzz_write(path, data, size);
    ckpt_file_t f;
    if (ckpt_read(path, &f, err, sizeof err) < 0) return 0;
    const char *lo = f.buf, *hi = (const char *)f.buf + f.buflen;
    float sum = 0;
    for (int i = 0; i < f.n; i++) {
        const ckpt_tensor_t *t = &f.tensors[i];
        const char *p = (const char *)t->data;
        FUZZ_CHECK(t->numel == 0 || (p >= lo && p + t->numel * sizeof(float) <= hi),
                   "tensor %s lies outside the file", t->name);
        FUZZ_CHECK(ckpt_file_find(&f, t->name) != NULL, "tensor %s not found by name", t->name);
        for (size_t k = 0; k < t->numel; k++) sum += t->data[k];
    }
    sink = sum;
    ckpt_file_close(&f);
    return 0;
}
