/*
 * pscom_precon_priv.h - what the parts of the pre-connection handshake
 * share (pscom_precon.h is its interface to the rest of the core):
 *
 *   pscom_precon.c           life cycle, attempts and retries, watchdog,
 *                            input framing and output, the transport start
 *   pscom_precon_msg.c       the messages: HELLO, transport negotiation
 *                            (OFFER, ACCEPT, CONFIRM, ...), REJECT
 *   pscom_precon_ondemand.c  on-demand: adopting a peer's connect,
 *                            back-connect requests
 */
#ifndef PSCOM_PRECON_PRIV_H
#define PSCOM_PRECON_PRIV_H

#include "pscom_precon.h"
#include "pscom_log.h"
#include "pscom_config.h"
#include "pscom_plugin.h"
#include "pscom_progress.h"
#include "pscom_wire.h"

enum precon_phase {
    PHASE_CONNECTING, /* connect side: TCP connect in progress */
    PHASE_HANDSHAKE,  /* exchanging messages */
    PHASE_RETRY_WAIT, /* connect side: back-off before the next attempt */
};

struct pscom_precon {
    pscom_con_t *con;
    pscom_ufd_t ufd;
    int is_connect;
    int phase;
    int hello_received;
    pscom_precon_peer_t peer;
    uint32_t peer_attempt;                /* accept side: attempt number in the peer's HELLO */

    /* input: header, then exactly hdr.len payload bytes, in in_inline or,
     * for a payload above PSCOM_PRECON_IN_INLINE, in in_big (precon_in()) */
    pscom_precon_header_t hdr;
    size_t in_have;
    unsigned char in_inline[PSCOM_PRECON_HEADER_SIZE + PSCOM_PRECON_IN_INLINE];
    unsigned char *in_big;

    /* output */
    unsigned char *out;
    size_t out_len, out_off, out_cap;

    /* negotiation */
    int next_idx;                         /* connect side: next plugin to offer */
    int cand_idx;                         /* plugin being negotiated, -1 none */
    int retried;                          /* connect side: a plugin was offered again
                                             (CONFIRM_FAIL with PSCOM_PRECON_FAIL_RETRY) */
    const pscom_plugin_desc_t *cand;
    int confirm_sent;                     /* connect side: CONFIRM for cand went: CONFIRM_OK
                                             or CONFIRM_FAIL is due, not ACCEPT or DECLINE */
    int start_when_flushed;               /* accept side: CONFIRM_OK queued */
    int pending;                          /* cand's con_connect/con_confirm goes on */
    int pending_done, pending_rc;         /* ... and is over (pscom_con_handshake_done) */
    unsigned char *pending_confirm;       /* connect side: the CONFIRM to send then */
    size_t pending_confirm_len;
    uint32_t flags;                       /* our HELLO flags (PSCOM_PRECON_FLAG_*) */
    pscom_con_t *od_owner;                /* back-connect request: the waiting connection */
    pscom_list_t bc_next;                 /* ... and in backconnects meanwhile */

    /* connect side: target and attempts */
    uint32_t addr;
    int port;
    unsigned attempt;                     /* attempts started (1 = the first) */
    unsigned backoff_ms;                  /* back-off waited between attempts so far */
    int ever_answered;                    /* some attempt got the peer's HELLO */
    int *direct_err;                      /* see pscom_precon_connect_to() */
    int last_err;                         /* errno of the last failed attempt */
    const char *last_what;                /* what failed last (for the final message) */

    /* watchdog: ticks every RECONNECT_TIMEOUT ms while connecting or
     * handshaking; the retry delay while waiting */
    pscom_timer_t timer;
    unsigned stalled;                     /* ticks without a byte moved */
    int moved;                            /* a byte moved since the last tick */
    unsigned ticks;                       /* ticks of this handshake (attempt) */
    unsigned msgs;                        /* messages read in it */
};

/* the message being read (header first) */
static inline unsigned char *precon_in(pscom_precon_t *pre)
{
    return pre->in_big ? pre->in_big : pre->in_inline;
}

#define dprecon(pre, ...)                                                      \
    pscom_log_force(pscom_config.debug_precon, PSCOM_LOG_DEBUG, __VA_ARGS__)

/* pscom_precon.c */
const char *precon_side(const pscom_precon_t *pre);
void precon_watchdog_arm(pscom_precon_t *pre);
void precon_pending_end(pscom_precon_t *pre);
void precon_cand_abort(pscom_precon_t *pre);
void precon_attempt_failed(pscom_precon_t *pre, int retryable, pscom_err_t err, int errnum,
                           const char *what);
void precon_handshake_failed(pscom_precon_t *pre, int retryable, pscom_err_t err, int errnum,
                             const char *what);
int precon_send_msg(pscom_precon_t *pre, uint16_t type, const void *p1, size_t l1, const void *p2,
                    size_t l2);
void precon_send_reject(pscom_precon_t *pre, uint32_t reason);
void precon_start_transport(pscom_precon_t *pre);
void precon_refuse(pscom_precon_t *pre, uint32_t reason);
void precon_attempt_start(pscom_precon_t *pre);
void precon_destroy(pscom_precon_t *pre);
void precon_fail(pscom_precon_t *pre, pscom_err_t err, int errnum);
void precon_finish_quietly(pscom_precon_t *pre);
pscom_precon_t *precon_create(pscom_con_t *con, int is_connect);

/* pscom_precon_msg.c */
void precon_pending_resume(pscom_precon_t *pre);
void precon_handle_msg(pscom_precon_t *pre, const unsigned char *p);
int precon_send_hello(pscom_precon_t *pre);

/* pscom_precon_ondemand.c */
void precon_backconnect_end(pscom_precon_t *pre, int failed, pscom_err_t err);
int precon_adopted_ondemand(const pscom_precon_t *pre);
int precon_adopt_ondemand(pscom_precon_t *pre);
void precon_handle_backconnect(pscom_precon_t *pre);

#endif /* PSCOM_PRECON_PRIV_H */
