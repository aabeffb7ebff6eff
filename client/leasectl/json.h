/*
 * The little JSON leasectl needs: reading the string and integer members
 * of one flat object (a lease printed by `leasectl … --json`), and
 * writing strings with escapes.
 */
#ifndef LEASECTL_JSON_H
#define LEASECTL_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Finds member key of the object in text and copies its string value
 * (unescaped, UTF-8) into out (len bytes). Returns false when absent,
 * not a string, or too long. */
bool json_get_string(const char *text, const char *key, char *out,
                     size_t len);

/* The same for a non-negative integer member. */
bool json_get_u64(const char *text, const char *key, uint64_t *out);

/* Writes s as a JSON string, quotes included: control characters
 * (C0, DEL, C1 as UTF-8) as \u escapes, so that the text never acts on
 * a terminal. */
void json_put_string(FILE *f, const char *s);

#endif
