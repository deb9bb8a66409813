/*
 * pscom_loop.h - the loopback pseudo-transport (not a negotiable plugin).
 */
#ifndef PSCOM_LOOP_H
#define PSCOM_LOOP_H

#include "pscom_plugin.h"

extern const pscom_plugin_desc_t pscom_loop_desc;

#endif /* PSCOM_LOOP_H */
