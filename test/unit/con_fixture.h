/*
 * con_fixture.h - unit-test fixture: a socket with two connections that
 * have no transport; the tests feed bytes into them (pscom_read_feed())
 * and drive the core directly.
 */
#ifndef PSCOM_TEST_CON_FIXTURE_H
#define PSCOM_TEST_CON_FIXTURE_H

#include "pscom.h"
#include "pscom_con.h"

/* pscom_init(), an INTER_JOB socket and two connections listed on it (not
 * closed by the user); close with pscom_close_socket(). */
pscom_socket_t *con_fixture_open(pscom_con_t **a, pscom_con_t **b);

/* No-op transport ops for a test's own plugin descriptor. */
int con_fixture_con_start(pscom_con_t *con, int *fd);
void con_fixture_close(pscom_con_t *con);

#endif /* PSCOM_TEST_CON_FIXTURE_H */
