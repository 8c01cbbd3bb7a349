/* curl_uv.c - libcurl multi on a libuv loop (see curl_uv.h). */
#include "daemon/shared/curl_uv.h"

#include <stdlib.h>

/* One socket curl asked us to watch; freed in its poll handle's close callback. */
typedef struct sock sock_t;
struct sock {
    uv_poll_t poll;
    curl_socket_t fd;
    curl_uv_t *c;
    sock_t *prev, *next;
};

struct curl_uv {
    uv_loop_t *loop;
    CURLM *multi;
    uv_timer_t timer; /* curl's wake-up (CURLMOPT_TIMERFUNCTION) */
    sock_t *socks;
    curl_uv_progress_fn progress;
    void *arg;
    int closing;      /* curl_uv_close was called */
    int cleaning;     /* inside curl_multi_cleanup: no curl_multi_assign */
    int open_handles; /* initialised handles whose close callback has not run */
    void (*closed)(void *arg);
    void *closed_arg;
};

static void release(curl_uv_t *c) {
    if (--c->open_handles > 0 || !c->closing) return;
    void (*closed)(void *) = c->closed;
    void *arg = c->closed_arg;
    free(c);
    if (closed) closed(arg);
}

static void timer_closed_cb(uv_handle_t *handle) {
    release(handle->data);
}

static void timeout_cb(uv_timer_t *t) {
    curl_uv_t *c = t->data;
    int running;
    curl_multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    c->progress(c->arg);
}

/* CURLMOPT_TIMERFUNCTION: only (re)arms the uv timer. */
static int timer_cb(CURLM *multi, long timeout_ms, void *user) {
    curl_uv_t *c = user;
    (void)multi;
    if (timeout_ms < 0)
        uv_timer_stop(&c->timer);
    else if (!c->closing)
        uv_timer_start(&c->timer, timeout_cb, (uint64_t)timeout_ms, 0);
    return 0;
}

static void poll_cb(uv_poll_t *p, int status, int events) {
    sock_t *sk = p->data;
    curl_uv_t *c = sk->c;
    int flags = 0, running;
    if (status < 0)
        flags = CURL_CSELECT_ERR;
    else {
        if (events & UV_READABLE) flags |= CURL_CSELECT_IN;
        if (events & UV_WRITABLE) flags |= CURL_CSELECT_OUT;
    }
    curl_multi_socket_action(c->multi, sk->fd, flags, &running);
    c->progress(c->arg);
}

static void sock_closed_cb(uv_handle_t *handle) {
    sock_t *sk = handle->data;
    curl_uv_t *c = sk->c;
    free(sk);
    release(c);
}

static void sock_close(curl_uv_t *c, sock_t *sk) {
    if (sk->prev)
        sk->prev->next = sk->next;
    else
        c->socks = sk->next;
    if (sk->next) sk->next->prev = sk->prev;
    uv_close((uv_handle_t *)&sk->poll, sock_closed_cb);
}

/* CURLMOPT_SOCKETFUNCTION: watch fd for what curl wants, or stop watching it. */
static int socket_cb(CURL *easy, curl_socket_t fd, int what, void *user, void *sockp) {
    curl_uv_t *c = user;
    sock_t *sk = sockp;
    (void)easy;
    if (what == CURL_POLL_REMOVE) {
        if (sk) {
            sock_close(c, sk);
            if (!c->cleaning) curl_multi_assign(c->multi, fd, NULL);
        }
        return 0;
    }
    if (!sk) {
        sk = calloc(1, sizeof *sk);
        if (!sk) return -1;
        if (uv_poll_init_socket(c->loop, &sk->poll, fd) < 0) {
            free(sk);
            return -1;
        }
        sk->poll.data = sk;
        sk->fd = fd;
        sk->c = c;
        sk->next = c->socks;
        if (c->socks) c->socks->prev = sk;
        c->socks = sk;
        c->open_handles++;
        curl_multi_assign(c->multi, fd, sk);
    }
    int events = 0;
    if (what & CURL_POLL_IN) events |= UV_READABLE;
    if (what & CURL_POLL_OUT) events |= UV_WRITABLE;
    uv_poll_start(&sk->poll, events, poll_cb);
    return 0;
}

curl_uv_t *curl_uv_new(uv_loop_t *loop, curl_uv_progress_fn progress, void *arg) {
    curl_uv_t *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    if (!(c->multi = curl_multi_init())) {
        free(c);
        return NULL;
    }
    c->loop = loop;
    c->progress = progress;
    c->arg = arg;
    curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, socket_cb);
    curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c);
    curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, timer_cb);
    curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, c);
    uv_timer_init(loop, &c->timer);
    c->timer.data = c;
    c->open_handles = 1;
    return c;
}

CURLM *curl_uv_multi(const curl_uv_t *c) {
    return c->multi;
}

void curl_uv_close(curl_uv_t *c, void (*closed)(void *arg), void *arg) {
    c->closing = 1;
    c->closed = closed;
    c->closed_arg = arg;
    c->cleaning = 1; /* sockets it still closes need no curl_multi_assign */
    curl_multi_cleanup(c->multi);
    c->multi = NULL;
    while (c->socks) sock_close(c, c->socks); /* those curl did not remove */
    uv_close((uv_handle_t *)&c->timer, timer_closed_cb);
}
