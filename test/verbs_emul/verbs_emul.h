/*
 * verbs_emul.h - test control of the software HCA (test/verbs_emul): what
 * a test can ask beyond the ibv_* calls. The emulation itself is steered by
 * environment variables (README.md).
 */
#ifndef VERBS_EMUL_H
#define VERBS_EMUL_H

#include <stdint.h>

#include <infiniband/verbs.h>

/* Datagrams the QP received and dropped: garbage (bad magic, version or
 * lengths) or not from the peer its RTR transition named. */
unsigned long verbs_emul_qp_dropped(struct ibv_qp *qp);

/* The LID a GID from ibv_query_gid() of the emulation stands for; 0 for any
 * other GID. */
uint16_t verbs_emul_lid_of_gid(const union ibv_gid *gid);

/* Send WRs this process has posted so far, as VERBS_EMUL_CORRUPT counts
 * them: every WR that post_send took into a send queue, over all contexts
 * and QPs, since the process started (a forked child starts at 0). The
 * next WR posted is number verbs_emul_sends_posted() + 1. */
unsigned long verbs_emul_sends_posted(void);

#endif
