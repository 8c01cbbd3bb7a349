/* webhook.c - the webhook signature (see webhook.h). */
#include "daemon/shared/webhook.h"

#include <limits.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h"

int webhook_sign(const char *secret, size_t secret_len, const char *id, const char *timestamp,
                 const char *body, size_t body_len, char out[WEBHOOK_SIG_LEN + 1]) {
    unsigned char mac[EVP_MAX_MD_SIZE], b64[4 * ((EVP_MAX_MD_SIZE + 2) / 3) + 1];
    unsigned int mac_len = 0;
    size_t id_len = strlen(id), ts_len = strlen(timestamp);
    size_t len = id_len + 1 + ts_len + 1 + body_len;
    unsigned char *msg = malloc(len);
    if (!msg) return NS_ERR_NOMEM;
    memcpy(msg, id, id_len);
    msg[id_len] = '.';
    memcpy(msg + id_len + 1, timestamp, ts_len);
    msg[id_len + 1 + ts_len] = '.';
    if (body_len) memcpy(msg + id_len + ts_len + 2, body, body_len);
    int ok = secret_len <= INT_MAX &&
             HMAC(EVP_sha256(), secret, (int)secret_len, msg, len, mac, &mac_len) != NULL &&
             mac_len == 32;
    free(msg);
    if (!ok) return -1;
    EVP_EncodeBlock(b64, mac, (int)mac_len); /* 44 characters and a NUL */
    memcpy(out, "v1,", 3);
    memcpy(out + 3, b64, WEBHOOK_SIG_LEN - 3 + 1);
    return 0;
}

int webhook_verify(const char *secret, size_t secret_len, const char *id, const char *timestamp,
                   const char *signatures, const char *body, size_t body_len, int64_t now,
                   char *err, size_t errlen) {
    char want[WEBHOOK_SIG_LEN + 1];
    if (!id || !*id) {
        snprintf(err, errlen, "missing webhook-id");
        return -1;
    }
    if (!timestamp || !*timestamp) {
        snprintf(err, errlen, "missing webhook-timestamp");
        return -1;
    }
    if (!signatures || !*signatures) {
        snprintf(err, errlen, "missing webhook-signature");
        return -1;
    }
    int64_t ts = 0;
    for (const char *p = timestamp; *p; p++) {
        if (*p < '0' || *p > '9' || p - timestamp >= 15) {
            snprintf(err, errlen, "webhook-timestamp: not unix seconds");
            return -1;
        }
        ts = ts * 10 + (*p - '0');
    }
    if (ts < now - WEBHOOK_TOLERANCE_S || ts > now + WEBHOOK_TOLERANCE_S) {
        snprintf(err, errlen, "webhook-timestamp %lld is %lld s from now (tolerance %d s)",
                 (long long)ts, (long long)(ts > now ? ts - now : now - ts), WEBHOOK_TOLERANCE_S);
        return -1;
    }
    int rc = webhook_sign(secret, secret_len, id, timestamp, body, body_len, want);
    if (rc < 0) {
        snprintf(err, errlen, rc == NS_ERR_NOMEM ? "out of memory" : "HMAC-SHA256 failed");
        return -1;
    }
    /* Space-separated "v1,<base64>" entries; other versions are skipped. */
    for (const char *p = signatures; *p;) {
        while (*p == ' ') p++;
        const char *end = p;
        while (*end && *end != ' ') end++;
        if (end - p == WEBHOOK_SIG_LEN && !strncmp(p, "v1,", 3) &&
            CRYPTO_memcmp(p, want, WEBHOOK_SIG_LEN) == 0)
            return 0;
        p = end;
    }
    snprintf(err, errlen, "no valid v1 signature in webhook-signature");
    return -1;
}
