/*
 * pscom_dump.h - the dumps' internal entry (the public ones: pscom.h).
 */
#ifndef PSCOM_DUMP_H
#define PSCOM_DUMP_H

/* pscom_dump_info()'s text as log lines, unconditionally, between a line
 * "<why>: dump of ..." and "<why>: end of dump" (lock held). */
void pscom_dump_info_log(const char *why);

#include <stddef.h>

/* The request statistics (pscom_dump_reqstat()'s line, without the
 * newline) into buf; PSP_DEBUG_STATS logs it at exit. */
void pscom_reqstat_str(char *buf, size_t size);

#endif /* PSCOM_DUMP_H */
