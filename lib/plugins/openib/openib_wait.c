/*
 * openib_wait.c - a blocking wait sleeps on the device's completion
 * channel instead of napping 1 ms at a time.
 *
 * The process's completion queue (or queues) is bound to the one channel.
 * When the core's blocking wait is about to sleep (pscom_poller_t.sleep),
 * it is armed (ibv_req_notify_cq), then emptied once more into the stashes:
 * a completion that came before the arming raises no event, so anything
 * found there (or still waiting for the poller) means "do not sleep".
 * Otherwise the channel's fd goes into the core's epoll set and the poller
 * leaves the passes. The next completion makes the fd readable: the events are read and acknowledged, the fd leaves the set
 * and the poller comes back. Whatever puts work on a queue while we sleep
 * (a new connection, a send from another thread) brings the poller back
 * first (openib_wake).
 *
 * Events are acknowledged as soon as they are read, so the queue never has
 * unacknowledged events when it is destroyed (ibv_destroy_cq waits for
 * them); the channel is drained before.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/epoll.h>

#include "openib_priv.h"

/* Read and acknowledge every event the channel holds. */
void openib_events_drain(void)
{
    struct ibv_cq *cq;
    void *ctx;
    if (!openib_dev.chan) return;
    while (ibv_get_cq_event(openib_dev.chan, &cq, &ctx) == 0) ibv_ack_cq_events(cq, 1);
}

static void disarm(void)
{
    openib_dev.armed = 0;
    pscom_ufd_del(&openib_dev.chan_ufd);
    openib_events_drain();
}

void openib_wake(void)
{
    if (!openib_dev.armed) return;
    disarm();
    pscom_poller_add(&openib_dev.poller);
}

static void chan_handler(pscom_ufd_t *ufd, uint32_t revents)
{
    openib_wake();
}

/* pscom_poller_t.sleep: 1 if the wait may sleep on the channel's fd. */
static int openib_sleep(pscom_poller_t *poller)
{
    if (!openib_dev.chan || !pscom_list_empty(&openib_dev.ready)) return 0;
    if (openib_cq_arm() < 0) return 0;
    /* what came before the arming raises no event: look once more */
    if (openib_cq_take() || !pscom_list_empty(&openib_dev.ready)) return 0;
    if (pscom_ufd_add(&openib_dev.chan_ufd) < 0) return 0;
    openib_dev.armed = 1;
    return 1;
}

/* pscom_poller_t.wake: the wait slept, the poller is still out */
static void openib_sleep_over(pscom_poller_t *poller)
{
    disarm();
}

int openib_wait_init(void)
{
    openib_dev.poller = (pscom_poller_t){.poll = openib_poll, .busy = openib_busy};
    openib_dev.chan   = ibv_create_comp_channel(openib_dev.ctx);
    if (!openib_dev.chan) {
        plog_dbg("openib: no completion channel (%s): blocked waits nap", strerror(errno));
        return 0;
    }
    int fl = fcntl(openib_dev.chan->fd, F_GETFL);
    if (fl < 0 || fcntl(openib_dev.chan->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        ibv_destroy_comp_channel(openib_dev.chan);
        openib_dev.chan = NULL;
        return 0;
    }
    openib_dev.chan_ufd = (pscom_ufd_t){
        .fd = openib_dev.chan->fd, .events = EPOLLIN, .handler = chan_handler};
    openib_dev.poller.sleep = openib_sleep;
    openib_dev.poller.wake  = openib_sleep_over;
    return 0;
}

void openib_wait_fini(void)
{
    if (!openib_dev.chan) return;
    if (openib_dev.armed) disarm();
    ibv_destroy_comp_channel(openib_dev.chan);
    openib_dev.chan = NULL;
}
