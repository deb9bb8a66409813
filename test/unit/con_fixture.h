/*
 * con_fixture.h - unit-test fixture: a socket with two connections that
 * have no transport; the tests feed bytes into them (pscom_read_feed())
 * and drive the core directly.
 */
#ifndef PSCOM_TEST_CON_FIXTURE_H
#define PSCOM_TEST_CON_FIXTURE_H

#include "pscom.h"
#include "pscom_con.h"
#include "pscom_plugin.h"

/* pscom_init(), an INTER_JOB socket and two connections listed on it (not
 * closed by the user); close with pscom_close_socket(). */
pscom_socket_t *con_fixture_open(pscom_con_t **a, pscom_con_t **b);

/* No-op transport ops for a test's own plugin descriptor. */
int con_fixture_con_start(pscom_con_t *con, int *fd);
void con_fixture_close(pscom_con_t *con);

/* A test's own fake transport: the descriptor `desc` (and desc##_ops),
 * named name_str, with capability bits caps_bits and the write_start op
 * write_fn; con_start and close do nothing. */
#define CON_FIXTURE_TRANSPORT(desc, name_str, caps_bits, write_fn)                     \
    static const pscom_plugin_ops_t desc##_ops = {                                      \
        .con_start   = con_fixture_con_start,                                           \
        .write_start = (write_fn),                                                      \
        .close       = con_fixture_close,                                               \
    };                                                                                  \
    static const pscom_plugin_desc_t desc = {                                           \
        .abi_version = PSCOM_PLUGIN_ABI_VERSION,                                        \
        .desc_size   = sizeof(pscom_plugin_desc_t),                                     \
        .name        = (name_str),                                                      \
        .caps        = (caps_bits),                                                     \
        .ops         = &desc##_ops,                                                     \
    }

/* A write_start that always succeeds: everything con has to send leaves
 * at once, each piece handed to sink first (if not NULL). */
void con_fixture_write_all(pscom_con_t *con, void (*sink)(const void *buf, size_t len));

#endif /* PSCOM_TEST_CON_FIXTURE_H */
