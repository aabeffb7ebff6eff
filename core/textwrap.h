/*
 * Text for a terminal, wrapped at a column: the --help of leased and of
 * leasectl. Widths count UTF-8 characters, not bytes. *col is the column
 * the caller's line has reached; each call moves it on.
 */
#ifndef LEASED_TEXTWRAP_H
#define LEASED_TEXTWRAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* The columns n bytes of s take. */
int textwrap_width(const char *s, size_t n);

/* Writes unit (n bytes) whole: after a space, or at the start of a new
 * line indented to indent when it would pass column width; first: where
 * the line is, as is (no space, no new line). */
void textwrap_unit(FILE *f, int *col, int width, int indent,
                   const char *unit, size_t n, bool first);

/* Writes text from *col, wrapped at width (new lines indented to indent),
 * breaking at spaces outside brackets ("[--owner O]" stays whole) and at
 * each "\n". Its first word goes where the line is. */
void textwrap_text(FILE *f, int *col, int width, int indent,
                   const char *text);

#endif
