/*
 * fuzz_handshake.h - handshake messages for the handshake fuzz targets
 * (fuzz_handshake.c) and random ones for their generators
 * (fuzz_hs_random.c), and the mark the targets replace by the node id.
 */
#ifndef PSCOM_FUZZ_HANDSHAKE_H
#define PSCOM_FUZZ_HANDSHAKE_H

#include <stddef.h>
#include <stdint.h>

#include "pscom_wire.h"

/* in the peer's bytes: the node id of the process under test */
#define FUZZ_NODE_MARK 0x45444f4eu /* "NODE" */

/* a message with this header, if it fits into room; returns its length or 0 */
size_t fuzz_hs_put_msg(unsigned char *p, size_t room, uint32_t magic, uint16_t type,
                       uint16_t version, const void *payload, size_t len);
/* the same with the right magic and version */
size_t fuzz_hs_put(unsigned char *p, size_t room, uint16_t type, const void *payload, size_t len);
/* a valid HELLO payload (node 127.0.0.1) */
pscom_precon_hello_t fuzz_hs_hello(uint32_t flags, const char *name);
/* a client's valid handshake for the accept side: HELLO (with these flags
 * and this name), OFFER of tcp, CONFIRM; returns its length or 0 (no room) */
size_t fuzz_hs_valid_accept(unsigned char *p, size_t room, uint32_t hello_flags,
                            const char *name);

/* ---- fuzz_hs_random.c (uses the driver's fuzz_rnd) ---- */

/* a value a 32-bit field might hold, or any */
uint32_t fuzz_hs_plausible32(void);
/* pl[from..len) as 32-bit words of fuzz_hs_plausible32(), the last 1-3
 * bytes random */
void fuzz_hs_fill(unsigned char *pl, size_t from, size_t len);
/* a message of this type whose magic and version are now and then wrong */
size_t fuzz_hs_put_any(unsigned char *p, size_t room, uint16_t type, const void *payload,
                       size_t len);
/* a generated input of the handshake targets: setup random set-up bytes,
 * 1-5 messages of gen_message (first: the first one), damaged */
size_t fuzz_hs_generate(unsigned char *in, size_t room, size_t setup,
                        size_t (*gen_message)(unsigned char *p, size_t room, int first));

#endif /* PSCOM_FUZZ_HANDSHAKE_H */
