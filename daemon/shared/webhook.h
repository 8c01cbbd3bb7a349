/* webhook.h - the webhook signature, the one contract between the daemon's
 * hook (the sender, hook.c) and an agent (the receiver, agent.c).
 *
 * Standard Webhooks: the webhook-signature header carries one or more
 * space-separated "v1,<base64>" of HMAC-SHA256(secret, id + "." + timestamp
 * + "." + body), where id and timestamp (unix seconds) are the webhook-id and
 * webhook-timestamp headers. */
#ifndef NIGHTSHIFT_WEBHOOK_H
#define NIGHTSHIFT_WEBHOOK_H

#include <stddef.h>
#include <stdint.h>

#define WEBHOOK_TOLERANCE_S 300      /* largest accepted |now - webhook-timestamp|, seconds */
#define WEBHOOK_SIG_LEN     (3 + 44) /* "v1," + base64 of 32 bytes */

/* Sign one delivery: "v1,<base64>" (WEBHOOK_SIG_LEN characters and a NUL)
 * into out. Returns 0, or NS_ERR_NOMEM or -1 (HMAC failed). */
int webhook_sign(const char *secret, size_t secret_len, const char *id, const char *timestamp,
                 const char *body, size_t body_len, char out[WEBHOOK_SIG_LEN + 1]);

/* Check a delivery: signatures is the webhook-signature header; one matching
 * v1 entry is enough (constant-time compare), other versions are skipped.
 * timestamp must be within WEBHOOK_TOLERANCE_S of now. Any argument but body
 * may be NULL (a missing header). Returns 0, or -1 with the reason in err. */
int webhook_verify(const char *secret, size_t secret_len, const char *id, const char *timestamp,
                   const char *signatures, const char *body, size_t body_len, int64_t now,
                   char *err, size_t errlen);

#endif
