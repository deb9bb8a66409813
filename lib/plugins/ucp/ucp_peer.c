/*
 * ucp_peer.c - UCX endpoints per peer worker, shared by the connections to
 * it, and created in an order both sides agree on.
 *
 * UCX pairs the endpoints two workers create to each other (from worker
 * addresses) by a sequence number that each side counts on its own, per
 * peer worker: the k-th endpoint one side creates to the other is paired
 * with the k-th the other side creates. With one endpoint per connection,
 * connections between the same two processes set up concurrently (threads,
 * or a connect each way at once) created their endpoints in different
 * orders on the two sides and were paired crosswise: closing one
 * connection's endpoint then cancelled the rendezvous transfers of another
 * (a DATA receive ended UCS_ERR_CANCELED and that connection failed;
 * itest_threads_conns).
 *
 * So we count as UCX does: a peer keeps the generation of the newest
 * endpoint we created to it (= UCX's sequence number + 1), and every
 * connection on an endpoint of generation g is paired with the peer's
 * endpoint of generation g. The connecting side takes its newest endpoint
 * to the peer if a connection still uses it and is not closing, else it
 * creates the next one; it tells the generation in its confirmation. The
 * accepting side uses its endpoint of that generation, creating endpoints
 * up to it where it is behind (one, usually); where it has closed that
 * generation already (the peer's connections on it were closing), it
 * refuses, and the handshake goes on to the next transport. The tags carry
 * the receiving connection's id, so connections share an endpoint freely.
 *
 * An endpoint no connection uses any more lingers for PSP_UCP_EP_LINGER ms
 * (ucp_linger_us(); closed on a timer of the core) before it is closed:
 * the peer may have decided to reuse it for a new connection just before
 * our last one on it closed (its connection there was not closing yet when
 * it decided), and its confirmation must still find it. A connecting side
 * reuses an endpoint with a connection that is not closing, or one that
 * has lingered for less than half that time: the peer's side of it went
 * idle at about the same moment (the two sides' last connections on it
 * close together), so it lingers there too (connect/close cycles between
 * two processes then use one endpoint).
 *
 * Death detector: the handshake socket of the first connection on an
 * endpoint (ucp_psock_t) stays open on both sides while the endpoint does;
 * later connections close theirs. The connecting side, which starts last,
 * writes UCP_KEPT on it when it starts: an EOF before that is its failed
 * handshake, not a dead peer, and fails that one connection only. The endpoint closes it with the goodbye
 * byte when it closes after lingering: the peer then closes its side at
 * once (and the connecting side no longer names an endpoint the other
 * side has closed, except in a race). EOF without the goodbye: the peer is
 * gone, or its side of the endpoint failed; every connection on it fails,
 * and the endpoint closes when the last has gone. A side whose handshake
 * on an endpoint failed, or whose endpoint failed, retires it: it serves
 * the connections it has, new ones take the next generation, which the
 * peer catches up to.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ucp_priv.h"

/* a peer worker: the generation of the newest endpoint we created to it;
 * kept for the life of the process, as UCX keeps its count */
typedef struct ucp_peer {
    pscom_list_t next; /* peers */
    pscom_list_t eps;  /* ucp_pep_t.next, open endpoints */
    uint32_t gen;
    size_t addr_len;
    unsigned char addr[];
} ucp_peer_t;

/* the peer workers we know of */
static pscom_list_t peers = PSCOM_LIST_INIT(peers);
/* endpoints no connection uses, the oldest first: closed after a while */
static pscom_list_t linger = PSCOM_LIST_INIT(linger);

/* an endpoint to a peer */
static inline uint64_t ucp_linger_us(void)
{
    return (uint64_t)ucp_cfg.ep_linger_ms * 1000;
}

struct ucp_pep {
    pscom_list_t next;        /* ucp_peer_t.eps */
    pscom_list_t linger_next; /* linger while no connection uses it */
    uint64_t idle_since_us;
    pscom_list_t cons; /* ucp_con_t.peer_next */
    ucp_peer_t *peer;
    ucp_ep_h ep;
    uint32_t gen;
    pscom_list_t socks;     /* ucp_psock_t.next: kept handshake sockets */
    pscom_list_t reqs;      /* ucp_req_t.pep_next: its operations in flight */
    struct ucp_req *close_req; /* its close, under way (in closing) */
    unsigned peer_mode : 1; /* UCP_ERR_HANDLING_MODE_PEER */
    unsigned wired : 1;     /* a flush of the endpoint completed */
    unsigned retired : 1;   /* a connection on it ended with an error (or its
                               handshake failed), or the peer closed its side:
                               no new ones */
    unsigned peer_closed : 1; /* the peer closed its side (goodbye on a socket) */
    unsigned ucx_failed : 1;  /* UCX reported it failed (ep_error_cb) */
    unsigned peer_gone : 1;   /* its side is closed or gone: a flush may never end */
    unsigned sock_both : 1;   /* a socket kept by a handshake we connected: the
                                 peer started it before us, both ends have it */
};

/* A handshake socket kept as the endpoint's death detector. Both ends of
 * it keep it (the connecting side says so in its confirmation) as long as
 * their endpoint is open: closed with the goodbye byte when the endpoint
 * closes after lingering (at exit: when its flush has ended, so that the
 * peer's goodbye or EOF meanwhile says the flush never will), without it
 * when the endpoint breaks (an error, FORCE). EOF without the goodbye: the peer process is
 * gone, or its side of the endpoint broke: every connection on it fails. */
#define UCP_GOODBYE 'B'
#define UCP_KEPT    'K' /* the connecting side started too: a detector from now on */
typedef struct ucp_psock {
    pscom_list_t next; /* ucp_pep_t.socks */
    pscom_ufd_t ufd;
    ucp_pep_t *e;
    ucp_con_t *uc; /* accepting side, until UCP_KEPT: the connection it came with */
    int kept;      /* both ends started: EOF without goodbye is the peer's end */
    int bye;       /* the peer's goodbye byte came */
} ucp_psock_t;

/* closed sockets, freed on a timer of the core: a handler of the core's
 * current batch of fd events may close another socket whose event comes
 * later in that batch (the core skips it, but reads its pscom_ufd_t) */
static pscom_list_t socks_dead = PSCOM_LIST_INIT(socks_dead);
static pscom_timer_t socks_dead_timer;

static void socks_dead_free(pscom_timer_t *timer)
{
    while (!pscom_list_empty(&socks_dead)) {
        ucp_psock_t *s = pscom_list_entry(socks_dead.next, ucp_psock_t, next);
        pscom_list_del(&s->next);
        free(s);
    }
}

static void psock_close(ucp_psock_t *s, int bye)
{
    if (bye) {
        char b = UCP_GOODBYE;
        (void)!send(s->ufd.fd, &b, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    pscom_ufd_del(&s->ufd);
    close(s->ufd.fd);
    s->ufd.fd = -1;
    pscom_list_del(&s->next);
    pscom_list_add_tail(&s->next, &socks_dead);
    if (socks_dead_timer.armed) return;
    socks_dead_timer.fn = socks_dead_free;
    pscom_timer_start(&socks_dead_timer, 0);
}

static void socks_close(ucp_pep_t *e, int bye)
{
    while (!pscom_list_empty(&e->socks))
        psock_close(pscom_list_entry(e->socks.next, ucp_psock_t, next), bye);
}

/* Nobody waits for e's operations any more: e is about to be freed, or
 * dead (its peer cannot end them). */
static void reqs_orphan(ucp_pep_t *e)
{
    while (!pscom_list_empty(&e->reqs))
        ucp_req_orphan(pscom_list_entry(e->reqs.next, ucp_req_t, pep_next));
}

/* The peer process or its side is gone (not gracefully: no goodbye), or
 * UCX failed the endpoint: its operations can never end. */
static int ep_dead(const ucp_pep_t *e)
{
    return e->ucx_failed || (e->peer_gone && !e->peer_closed);
}

/* e turned out dead (ep_dead() just became true) */
static void ep_orphan_all(ucp_pep_t *e)
{
    reqs_orphan(e);
    if (e->close_req) ucp_req_orphan(e->close_req);
}

void ucp_peer_req(const ucp_con_t *uc, ucp_req_t *r)
{
    ucp_pep_t *e = uc->pep;
    if (!e) return;
    if (ep_dead(e)) {
        ucp_req_orphan(r);
    } else {
        pscom_list_del(&r->pep_next); /* (a drop: out of ucp_g.discards) */
        pscom_list_add_tail(&r->pep_next, &e->reqs);
    }
}

/* e's close has ended (or is given up at exit): its sockets close with the
 * goodbye (kept while an exit's flush went on, ucp_peers_fini), operations
 * still on it are orphans (FORCE: UCX 1.13 may keep a rendezvous send),
 * and e is freed (with its close request, whose buf it is) */
static void ep_end(ucp_pep_t *e)
{
    socks_close(e, 1);
    reqs_orphan(e);
    if (e->close_req) {
        ucp_req_release(e->close_req); /* frees e */
    } else {
        free(e);
    }
}

/* endpoints whose close is under way (ucp_pep_t.next, .close_req) */
static pscom_list_t closing = PSCOM_LIST_INIT(closing);

/* Is e one of ours (open, or its close under way), not freed? */
static int ep_known(const ucp_pep_t *e)
{
    pscom_list_t *pos, *pos2;
    pscom_list_for_each(pos, &closing)
    {
        if (pscom_list_entry(pos, ucp_pep_t, next) == e) return 1;
    }
    pscom_list_for_each(pos, &peers)
    {
        ucp_peer_t *p = pscom_list_entry(pos, ucp_peer_t, next);
        pscom_list_for_each(pos2, &p->eps)
        {
            if (pscom_list_entry(pos2, ucp_pep_t, next) == e) return 1;
        }
    }
    return 0;
}

/* UCX 1.13 may call an endpoint's error handler after ucp_ep_close_nbx()
 * with FORCE has returned at once, and e has been freed (ep_end): over its
 * tcp, when the connection of an endpoint closed that way fails later (seen
 * at exit; ASan in itest_ucp_garbage ucp_garbage_late_data.ucp-tcp,
 * 2026-11-29). So e is looked at only if it is still ours; a closing one
 * has no ep any more. */
static void ep_error_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    ucp_pep_t *e = arg;
    if (!ep_known(e) || e->ep != ep) return;
    plog_dbg("ucp: endpoint error: %s", ucs_status_string(status));
    e->ucx_failed = 1;
    ep_orphan_all(e);
    pscom_list_t *pos;
    pscom_list_for_each(pos, &e->cons)
    {
        ucp_con_t *uc = pscom_list_entry(pos, ucp_con_t, peer_next);
        uc->ep_failed = 1;
        ucp_failed(uc); /* reported by the poller, after what already arrived */
    }
}

/* Error handling mode: NONE by default; dead peers are noticed through
 * the handshake socket (ucp_handshake.c). With PSP_UCP_ERR_HANDLING=1,
 * UCP_ERR_HANDLING_MODE_PEER where UCX supports it (tcp, verbs): UCX then
 * also notices unreachable peers (keepalive), but UCX 1.13 drops the RMA
 * lane of tcp endpoints in that mode, so that rendezvous data goes as
 * fragmented active messages (1 MiB ping-pong over tcp on loopback: about
 * 0.65x). UCX 1.13's shared-memory transports refuse the mode; after the
 * first "unreachable" we use NONE for the rest of the process. UCX logs
 * that first refusal as an error; as it is expected, that message is held
 * back (ucp_log.c). Every ucp_ep_create() that got as far as refusing
 * "unreachable" or creating counts in UCX's sequence, so in ours too. */
static int peer_mode_unsupported;

/* ep_close()'s bye at exit: the sockets stay open while the flush goes on,
 * and close with the goodbye when it ends (ucp_peers_fini) */
#define UCP_BYE_AFTER_FLUSH 2
static void ep_close(ucp_pep_t *e, int force, int bye);

static ucp_pep_t *ep_create(ucp_peer_t *p, ucs_status_t *st_out, const char **why)
{
    ucp_pep_t *e = calloc(1, sizeof(*e));
    if (!e) {
        *st_out = UCS_ERR_NO_MEMORY;
        return NULL;
    }
    ucp_ep_params_t prm = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .address     = (const ucp_address_t *)p->addr,
        .err_mode    = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {.cb = ep_error_cb, .arg = e},
    };
    ucs_status_t st = UCS_ERR_UNREACHABLE;
    if (ucp_cfg.err_handling && !peer_mode_unsupported) {
        ucp_log_hold();
        st = ucp_ep_create(ucp_g.worker, &prm, &e->ep);
        ucp_log_release(st == UCS_ERR_UNREACHABLE); /* expected: dropped; else replayed */
        if (st == UCS_OK || st == UCS_ERR_UNREACHABLE) p->gen++;
        if (st == UCS_ERR_UNREACHABLE) {
            peer_mode_unsupported = 1;
            plog_dbg("ucp: the UCX transports in use cannot detect peer failures; using "
                     "UCP_ERR_HANDLING_MODE_NONE (dead peers are noticed through the "
                     "handshake socket)");
        }
    }
    if (st == UCS_ERR_UNREACHABLE) {
        prm.err_mode = UCP_ERR_HANDLING_MODE_NONE;
        ucp_log_hold(); /* a failure's reason goes into our line (ep_next) */
        st = ucp_ep_create(ucp_g.worker, &prm, &e->ep);
        *why = ucp_log_release(st != UCS_OK);
        if (st == UCS_OK) p->gen++;
    }
    *st_out = st;
    if (st != UCS_OK) {
        free(e);
        return NULL;
    }
    e->peer      = p;
    e->gen       = p->gen;
    e->peer_mode = prm.err_mode == UCP_ERR_HANDLING_MODE_PEER;
    pscom_list_init(&e->cons);
    pscom_list_init(&e->linger_next);
    pscom_list_init(&e->socks);
    pscom_list_init(&e->reqs);
    pscom_list_add_tail(&e->next, &p->eps);
    ucp_wake(); /* wire-up needs progress */
    return e;
}

static ucp_peer_t *peer_get(const void *addr, size_t addr_len)
{
    pscom_list_t *pos;
    pscom_list_for_each(pos, &peers)
    {
        ucp_peer_t *p = pscom_list_entry(pos, ucp_peer_t, next);
        if (p->addr_len == addr_len && !memcmp(p->addr, addr, addr_len)) return p;
    }
    ucp_peer_t *p = calloc(1, sizeof(*p) + addr_len);
    if (!p) return NULL;
    memcpy(p->addr, addr, addr_len);
    p->addr_len = addr_len;
    pscom_list_init(&p->eps);
    pscom_list_add_tail(&p->next, &peers);
    return p;
}

static ucp_pep_t *ep_of_gen(ucp_peer_t *p, uint32_t gen)
{
    pscom_list_t *pos;
    pscom_list_for_each(pos, &p->eps)
    {
        ucp_pep_t *e = pscom_list_entry(pos, ucp_pep_t, next);
        if (e->gen == gen) return e;
    }
    return NULL;
}

/* the newest endpoint, if not retired and a connection on it is neither
 * closing nor failed, or if it has lingered for less than half its time */
static ucp_pep_t *ep_reusable(ucp_peer_t *p)
{
    ucp_pep_t *e = ep_of_gen(p, p->gen);
    if (!e || e->retired) return NULL;
    if (pscom_list_linked(&e->linger_next))
        return ucp_now_us() - e->idle_since_us < ucp_linger_us() / 2 ? e : NULL;
    pscom_list_t *pos;
    pscom_list_for_each(pos, &e->cons)
    {
        ucp_con_t *uc = pscom_list_entry(pos, ucp_con_t, peer_next);
        if (!uc->closed && !uc->ep_failed && !uc->sock_dead && !uc->bye_eof &&
            !pscom_con_closing(uc->con))
            return e;
    }
    return NULL;
}

static void attach(ucp_con_t *uc, ucp_pep_t *e)
{
    ucp_peer_t *p    = e->peer;
    pscom_list_del(&e->linger_next); /* used again */
    uc->pep          = e;
    uc->ep           = e->ep;
    /* a connection to our own worker: UCX's "self" delivers a message at
     * once, inside the send (see send_one) */
    uc->self_peer = p->addr_len == ucp_g.addr_len && !memcmp(p->addr, ucp_g.addr, p->addr_len);
    pscom_list_add_tail(&uc->peer_next, &e->cons);
}

static void ep_close_cb(void *request, ucs_status_t status, void *user_data)
{
    ucp_req_t *r = request;
    ucp_pep_t *e = (ucp_pep_t *)r->buf;
    pscom_list_del(&e->next);
    ep_end(e);
}

/* Close an endpoint no connection uses (FLUSH, or FORCE: its operations
 * are cancelled) and its sockets (bye: gracefully, with the goodbye byte).
 * One that UCX reported failed closes with FORCE whatever its mode: a
 * flush of it can only fail, and UCX logs that failure as an error (over
 * tcp, when the peer process exits while its endpoint is still open
 * here). UCX may name e in callbacks until the close ends. */
static void ep_close(ucp_pep_t *e, int force, int bye)
{
    force |= e->ucx_failed;
    pscom_list_del(&e->next);
    pscom_list_del(&e->linger_next);
    if (bye != UCP_BYE_AFTER_FLUSH) socks_close(e, bye);
    plog_dbg("ucp: endpoint %u closed%s", e->gen, force ? " (force)" : "");
    ucp_ep_h ep = e->ep;
    e->ep       = NULL;
    ucp_request_param_t prm = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_FLAGS,
        .cb.send      = ep_close_cb,
        .flags        = force ? UCP_EP_CLOSE_FLAG_FORCE : 0,
    };
    ucs_status_ptr_t st = ucp_ep_close_nbx(ep, &prm);
    if (UCS_PTR_IS_PTR(st)) {
        ucp_req_track(st, UCP_REQ_CLOSE, 0);
        ((ucp_req_t *)st)->buf = (char *)e;
        e->close_req           = st;
        if (ep_dead(e)) ucp_req_orphan(st);
        pscom_list_add_tail(&e->next, &closing);
        ucp_wake();
        return;
    }
    if (UCS_PTR_STATUS(st) != UCS_OK && !force)
        plog_dbg("ucp: ucp_ep_close_nbx(): %s", ucs_status_string(UCS_PTR_STATUS(st)));
    ep_end(e); /* UCP_BYE_AFTER_FLUSH: the flush has ended */
}

/* the next endpoint to p, for uc (which an error names). A peer that the
 * transports of UCX_TLS cannot reach is said once at error level (with
 * UCX's reason), then at debug level: the handshake goes on to the next
 * transport, and the core says if there is none. */
static ucp_pep_t *ep_next(ucp_peer_t *p, ucp_con_t *uc)
{
    static int unreachable_told;
    ucs_status_t st;
    const char *why = NULL;
    ucp_pep_t *e    = ep_create(p, &st, &why);
    if (!e) {
        int told = st == UCS_ERR_UNREACHABLE && unreachable_told++;
        pscom_log(told ? PSCOM_LOG_DEBUG : PSCOM_LOG_ERROR, "%s: ucp: ucp_ep_create(): %s%s%s",
                  pscom_con_name(uc->con), ucs_status_string(st), why ? ": " : "",
                  why ? why : "");
    }
    return e;
}

int ucp_peer_connect(ucp_con_t *uc, const void *addr, size_t addr_len, uint32_t *gen)
{
    ucp_peer_t *p = peer_get(addr, addr_len);
    if (!p) return -1;
    ucp_pep_t *e = ep_reusable(p);
    if (!e) e = ep_next(p, uc);
    if (!e) return -1;
    attach(uc, e);
    *gen = e->gen;
    return 0;
}

int ucp_peer_accept(ucp_con_t *uc, const void *addr, size_t addr_len, uint32_t gen)
{
    ucp_peer_t *p = peer_get(addr, addr_len);
    if (!p) return -1;
    ucp_pep_t *e = NULL;
    if (gen > p->gen) {
        /* behind: create up to it (those in between, if any, the peer
         * created for handshakes that did not reach us; closed at once) */
        plog_dbg("%s: ucp: endpoints %u to %u created, to pair with the peer's",
                 pscom_con_name(uc->con), p->gen + 1, gen);
        while (p->gen < gen) {
            e = ep_next(p, uc);
            if (!e) return -1;
            if (p->gen < gen) ep_close(e, 0, 0);
        }
    } else {
        e = ep_of_gen(p, gen);
        if (!e) {
            plog_dbg("%s: ucp: the peer's endpoint %u is paired with one of ours that is "
                     "closed; refused (the peer offers ucp again, on a new one)",
                     pscom_con_name(uc->con), gen);
            return UCP_PEER_REFUSED;
        }
    }
    attach(uc, e);
    return 0;
}

int ucp_peer_wired(const ucp_con_t *uc)
{
    return uc->pep && uc->pep->wired;
}

void ucp_peer_set_wired(ucp_con_t *uc)
{
    if (uc->pep) uc->pep->wired = 1;
}

/* Close the endpoints that have lingered their time, the oldest first,
 * and arm the timer for the next. A timer of the core, not the poller: a
 * process without ucp connections leaves the poller off. */
static pscom_timer_t linger_timer;

static void linger_expired(pscom_timer_t *timer)
{
    uint64_t now = ucp_now_us(), l = ucp_linger_us();
    while (!pscom_list_empty(&linger)) {
        ucp_pep_t *e = pscom_list_entry(linger.next, ucp_pep_t, linger_next);
        uint64_t idle = now - e->idle_since_us;
        if (idle < l) { /* in whole ms, rounded up */
            uint64_t ms = (l - idle + 999) / 1000;
            pscom_timer_start(timer, ms > UINT_MAX ? UINT_MAX : (unsigned)ms);
            return;
        }
        ep_close(e, 0, 1);
    }
}

static void linger_start(ucp_pep_t *e)
{
    e->idle_since_us = ucp_now_us();
    pscom_list_add_tail(&e->linger_next, &linger);
    if (linger_timer.armed) return; /* due for an older one */
    linger_timer.fn = linger_expired;
    linger_expired(&linger_timer);
}

/* Fail every connection on e (sock_dead: the endpoint's detector says the
 * peer or its side of the endpoint is gone). */
static void cons_fail(ucp_pep_t *e)
{
    pscom_list_t *pos;
    pscom_list_for_each(pos, &e->cons)
    {
        ucp_con_t *uc = pscom_list_entry(pos, ucp_con_t, peer_next);
        uc->sock_dead = 1;
        ucp_failed(uc); /* reported by the poller, after what already arrived */
    }
}

void ucp_peer_detach(ucp_con_t *uc, int force, int retire)
{
    ucp_pep_t *e = uc->pep;
    uc->ep       = NULL;
    if (!e) return;
    uc->pep = NULL;
    pscom_list_del(&uc->peer_next);
    pscom_list_t *pos;
    pscom_list_for_each(pos, &e->socks)
    {
        ucp_psock_t *s = pscom_list_entry(pos, ucp_psock_t, next);
        if (s->uc == uc) s->uc = NULL;
    }
    if (retire) e->retired = 1;
    if (force) {
        /* transfers that a dead or broken peer may never end: cancel them
         * before the core takes their buffers back; the other connections
         * on the endpoint fail with it */
        while (!pscom_list_empty(&e->cons)) {
            ucp_con_t *o = pscom_list_entry(e->cons.next, ucp_con_t, peer_next);
            pscom_list_del(&o->peer_next);
            o->pep       = NULL;
            o->ep        = NULL;
            o->ep_failed = 1;
            ucp_failed(o);
        }
        ep_close(e, 1, 0);
        return;
    }
    if (retire && uc->started && !pscom_list_empty(&e->socks)) {
        /* the endpoint failed (ucp_handshake.c con_teardown): the peer
         * learns it through the endpoint's sockets (EOF without goodbye),
         * and fails its connections on it; so do we */
        socks_close(e, 0);
        cons_fail(e);
    }
    if (!pscom_list_empty(&e->cons)) return;
    if (uc->sock_dead || uc->ep_failed || e->peer_closed || (retire && uc->started)) {
        ep_close(e, e->peer_mode, 0); /* the peer's side is gone; FORCE is for mode PEER */
    } else {
        linger_start(e);
    }
}

int ucp_peer_keep_wanted(const ucp_con_t *uc)
{
    return uc->pep && !uc->pep->sock_both;
}

/* The peer's side of the endpoint is gone (no goodbye: the process, or
 * its side broke) or closed after lingering (bye). */
static void peer_side_closed(ucp_pep_t *e, int bye)
{
    e->retired   = 1;
    e->peer_gone = 1;
    if (bye) {
        e->peer_closed = 1;
        pscom_list_t *pos;
        pscom_list_for_each(pos, &e->cons)
        {
            ucp_con_peer_closed(pscom_list_entry(pos, ucp_con_t, peer_next));
        }
    } else {
        plog_dbg("ucp: endpoint %u: peer process gone (a socket closed without goodbye)",
                 e->gen);
        ep_orphan_all(e);
        socks_close(e, 0);
        cons_fail(e);
    }
    if (pscom_list_empty(&e->cons)) ep_close(e, bye ? 0 : e->peer_mode, 0);
}

/* Read what the peer wrote on a kept socket (its 'K', its goodbye).
 * Returns 1 if the socket has ended (EOF or error), 0 while it is open. */
static int psock_read(ucp_psock_t *s)
{
    char buf[16];
    for (;;) {
        ssize_t n = recv(s->ufd.fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0) {
            if (memchr(buf, UCP_KEPT, (size_t)n)) s->kept = 1;
            if (memchr(buf, UCP_GOODBYE, (size_t)n)) s->bye = 1;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        return !(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
    }
}

static void psock_handler(pscom_ufd_t *ufd, uint32_t revents)
{
    ucp_psock_t *s = ufd->priv;
    if (!psock_read(s)) return;
    ucp_pep_t *e  = s->e;
    ucp_con_t *uc = s->uc;
    int bye = s->bye, kept = s->kept;
    psock_close(s, 0);
    if (!kept) {
        /* the connecting side closed it before its start (its handshake
         * failed after ours ended): only the connection it came with fails,
         * the endpoint's others are not concerned */
        plog_dbg("ucp: endpoint %u: a socket closed before the peer started its connection",
                 e->gen);
        if (uc) {
            uc->sock_dead = 1;
            ucp_failed(uc);
        }
        return;
    }
    if (bye && !pscom_list_empty(&e->socks)) return; /* the others say the same */
    peer_side_closed(e, bye);
}

int ucp_peer_sock_fd(const ucp_con_t *uc)
{
    if (!uc->pep || pscom_list_empty(&uc->pep->socks)) return -1;
    return pscom_list_entry(uc->pep->socks.next, ucp_psock_t, next)->ufd.fd;
}

int ucp_peer_keep(ucp_con_t *uc, int fd)
{
    ucp_pep_t *e   = uc->pep;
    ucp_psock_t *s = e ? calloc(1, sizeof(*s)) : NULL;
    if (!s) return -1;
    s->e   = e;
    s->ufd = (pscom_ufd_t){
        .fd = fd, .events = EPOLLIN, .handler = psock_handler, .priv = s, .quiet = 1};
    if (pscom_ufd_add(&s->ufd) < 0) {
        free(s);
        return -1;
    }
    pscom_list_add_tail(&s->next, &e->socks);
    if (uc->connect_side) {
        /* the accepting side started before us (CONFIRM_OK): both ends have
         * it, and the peer learns that we started too */
        char k = UCP_KEPT;
        (void)!send(fd, &k, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        s->kept      = 1;
        e->sock_both = 1;
    } else {
        s->uc = uc;
    }
    return 0;
}

/* At exit, after ucp_peers_fini() and waiting for the closes: those that
 * did not end (a peer that takes no more messages: the flush cannot end)
 * are left to UCX, and the sockets closed meanwhile are freed. A request
 * the user has not released makes ucp_worker_destroy() assert. */
void ucp_peers_abandon(void)
{
    while (!pscom_list_empty(&closing)) {
        ucp_pep_t *e = pscom_list_entry(closing.next, ucp_pep_t, next);
        pscom_list_del(&e->next);
        plog_dbg("ucp: endpoint %u: its close did not end%s", e->gen,
                 e->peer_gone ? " (the peer had closed its side)" : "");
        ep_end(e);
    }
    pscom_timer_stop(&socks_dead_timer); /* not from inside an fd handler */
    socks_dead_free(&socks_dead_timer);
}

/* Has the peer closed its side of e (goodbye or EOF on a kept socket)? Read
 * without the core (at exit its fd events are not waited for any more). */
static int peer_gone(ucp_pep_t *e)
{
    pscom_list_t *pos;
    pscom_list_for_each(pos, &e->socks)
    {
        ucp_psock_t *s = pscom_list_entry(pos, ucp_psock_t, next);
        if (psock_read(s) || s->bye) return 1;
    }
    return 0;
}

int ucp_peers_closes_may_end(void)
{
    pscom_list_t *pos;
    pscom_list_for_each(pos, &closing)
    {
        ucp_pep_t *e = pscom_list_entry(pos, ucp_pep_t, next);
        if (!e->peer_gone && !(e->peer_gone = peer_gone(e))) return 1;
    }
    return 0;
}

void ucp_peers_fini(void)
{
    pscom_timer_stop(&linger_timer);
    while (!pscom_list_empty(&peers)) {
        ucp_peer_t *p = pscom_list_entry(peers.next, ucp_peer_t, next);
        while (!pscom_list_empty(&p->eps)) {
            ucp_pep_t *e = pscom_list_entry(p->eps.next, ucp_pep_t, next);
            while (!pscom_list_empty(&e->cons)) pscom_list_del(e->cons.next);
            ep_close(e, 0, UCP_BYE_AFTER_FLUSH);
        }
        pscom_list_del(&p->next);
        free(p);
    }
}
