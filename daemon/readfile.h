/*
 * Reading a small configuration file whole (token files, the policy
 * file), with the checks every such file gets: a regular file, no larger
 * than a limit, and no permission bit that would let the wrong people at
 * it; and cutting its lines into blank-separated fields.
 */
#ifndef LEASED_READFILE_H
#define LEASED_READFILE_H

#include <stddef.h>
#include <sys/types.h>

/* Reads path into a new buffer of max + 1 bytes (free it; wipe it first
 * if it held secrets), NUL-terminated after the *got bytes read. Refuses,
 * returning NULL with errmsg set: a file that is missing, unreadable, not
 * regular, larger than max bytes, or whose mode has any bit of forbid;
 * then errmsg says what lets whom at it (`who`, e.g. "group or others
 * at it") and the fix (`chmod MODE path`). */
char *readfile(const char *path, size_t max, mode_t forbid, const char *who,
               const char *mode, size_t *got, char *errmsg, size_t len);

/* Cuts the next field off *p (a NUL-terminated line, cut in place),
 * fields being separated by any of the characters of blanks; NULL when
 * none is left. */
char *readfile_field(char **p, const char *blanks);

#endif
