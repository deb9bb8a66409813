/*
 * pscom_plugin_reg.h - the registry of transport plugins: built-in ones
 * and loadable modules, their user priorities (PSP_<NAME>) and the order
 * in which the handshake proposes them.
 */
#ifndef PSCOM_PLUGIN_REG_H
#define PSCOM_PLUGIN_REG_H

#include "pscom_plugin.h"
#include "pscom_types.h"

/* A loadable module the core looks for, with the default of PSP_<NAME>
 * (generated table pscom_module_plugins[], lib/plugins/CMakeLists.txt). The
 * default is known before loading because a module whose priority is 0 is
 * not loaded at all: loading runs the constructors of the libraries it
 * links, and UCX's install signal handlers (SIGSEGV, SIGBUS, ...) and hook
 * the process's mmap/munmap/madvise, which a process that switched ucp off
 * must not get. A loaded module's descriptor should say the same default
 * (a difference is logged; the table's counts). */
typedef struct pscom_module_info {
    const char *name;
    unsigned user_priority;
} pscom_module_info_t;

/* Register, configure and initialise every plugin (first socket open). */
void pscom_plugins_init(void);
void pscom_plugins_fini(void);

/* Enabled plugins in handshake order (user priority, then default
 * priority, both descending). */
int pscom_plugins_count(void);
const pscom_plugin_desc_t *pscom_plugin_at(int idx);
/* Enabled plugin by name, with its index; NULL if none. */
const pscom_plugin_desc_t *pscom_plugin_find(const char *name, int *idx);

/* Per-socket plugin state. */
int pscom_plugins_sock_init(pscom_sock_t *sock);
void pscom_plugins_sock_fini(pscom_sock_t *sock);
/* May this plugin be used on this socket (mask, sock_init ok)? */
int pscom_plugin_usable(pscom_sock_t *sock, int idx);

#endif /* PSCOM_PLUGIN_REG_H */
