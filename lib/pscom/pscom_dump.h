/*
 * pscom_dump.h - the dumps' internal entry (the public ones: pscom.h).
 */
#ifndef PSCOM_DUMP_H
#define PSCOM_DUMP_H

/* pscom_dump_info()'s text as log lines, unconditionally, between a line
 * "<why>: dump of ..." and "<why>: end of dump" (lock held). */
void pscom_dump_info_log(const char *why);

#endif /* PSCOM_DUMP_H */
