/*
 * Bearer tokens (--auth-token-file): the set of tokens a call may present
 * as `authorization: Bearer <token>`.
 *
 * The file holds one token per line, alone or after its name: `TOKEN` or
 * `NAME TOKEN`, fields separated by blanks (spaces, tabs); blank lines
 * and lines starting with '#' are ignored. A token is 1..TOKENS_MAX_LEN
 * characters of [A-Za-z0-9-._~+/=] (RFC 6750); a name, the identity of
 * whoever presents the token, 1..TOKENS_NAME_MAX characters of
 * [A-Za-z0-9-._:@]. A token without a name is named `token-LINE`, LINE
 * its line number in the file. No name and no token may appear twice.
 * The file must belong to nobody but its owner: any group or other
 * permission bit refuses it, as ssh does with keys. Tokens never appear
 * in messages.
 *
 * tokens_check() may run on any thread while tokens_reload() replaces the
 * set on another; it compares in time that depends on neither a token's
 * contents nor which token matched.
 */
#ifndef LEASED_TOKENS_H
#define LEASED_TOKENS_H

#include <stdbool.h>
#include <stddef.h>

#define TOKENS_MAX_LEN 256
#define TOKENS_MAX_COUNT 64
#define TOKENS_NAME_MAX 64

struct tokens;

/* Reads path (borrowed; kept for reloads). Returns NULL with errmsg set
 * when the file is missing, unreadable, too open, has no token, or has a
 * bad line (named by number). */
struct tokens *tokens_load(const char *path, char *errmsg, size_t len);

/* Parses text (text_len bytes, borrowed; it need not be NUL-terminated)
 * exactly as tokens_load() parses a file's contents; name (borrowed, not
 * kept) stands for the file in messages. The set has no file to reload:
 * tokens_reload() on it fails. Returns NULL with errmsg set when the text
 * is longer than a token file may be (64 KiB), has no token, or has a bad
 * line, or when out of memory. For tests and fuzzing; the daemon loads
 * files. */
struct tokens *tokens_parse(const char *name, const char *text,
                            size_t text_len, char *errmsg, size_t len);

/* Reads the file again; on any error the old set stays and errmsg says
 * why. Returns 0 or -1. */
int tokens_reload(struct tokens *t, char *errmsg, size_t len);

/* Whether value (an `authorization` header value, value_len bytes, not
 * NUL-terminated) is "Bearer <token>" for a token in the set. If so, and
 * name is not NULL, name gets the token's name (NUL-terminated); if not,
 * "". */
bool tokens_check(struct tokens *t, const char *value, size_t value_len,
                  char name[TOKENS_NAME_MAX + 1]);

/* Number of tokens in the set. */
size_t tokens_count(struct tokens *t);

/* Accepts NULL. */
void tokens_free(struct tokens *t);

#endif
