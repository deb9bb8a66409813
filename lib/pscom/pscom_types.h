/*
 * pscom_types.h - forward declarations and small helpers shared by every
 * core module. Each module's own header holds its structs.
 */
#ifndef PSCOM_TYPES_H
#define PSCOM_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "pscom.h"

typedef struct pscom_sock pscom_sock_t;     /* private socket (lib/pscom/pscom_sock.h) */
typedef struct pscom_con pscom_con_t;       /* private connection (pscom_con.h) */
typedef struct pscom_req pscom_req_t;       /* private request (pscom_req.h) */
typedef struct pscom_plugin pscom_plugin_t; /* registered plugin (pscom_plugin_reg.h) */
typedef struct pscom_precon pscom_precon_t; /* handshake state (pscom_precon.h) */
typedef struct pscom_ufd pscom_ufd_t;       /* fd in the progress engine (pscom_progress.h) */
typedef struct pscom_poller pscom_poller_t; /* polled transport (pscom_progress.h) */
typedef struct pscom_timer pscom_timer_t;   /* one-shot timer (plugin/pscom_plugin.h) */

/* Symbols of the public API (include/pscom.h) and of the plugin SDK are
 * exported; everything else is hidden (-fvisibility=hidden). */
#define PSCOM_API __attribute__((visibility("default")))
#define PSCOM_PLUGIN_API __attribute__((visibility("default")))

#define pscom_likely(x)   __builtin_expect(!!(x), 1)
#define pscom_unlikely(x) __builtin_expect(!!(x), 0)

#define pscom_container_of(ptr, type, member)                                  \
    ((type *)((char *)(ptr)-offsetof(type, member)))

#endif /* PSCOM_TYPES_H */
