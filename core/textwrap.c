/* Text wrapped at a column (see textwrap.h). */
#include "textwrap.h"

int textwrap_width(const char *s, size_t n)
{
    int w = 0;
    for (size_t i = 0; i < n; i++)
        w += ((unsigned char)s[i] & 0xc0) != 0x80; /* not a continuation */
    return w;
}

void textwrap_unit(FILE *f, int *col, int width, int indent,
                   const char *unit, size_t n, bool first)
{
    int w = textwrap_width(unit, n);
    if (!first && *col + 1 + w > width) {
        fprintf(f, "\n%*s", indent, "");
        *col = indent;
    } else if (!first) {
        fputc(' ', f);
        (*col)++;
    }
    fwrite(unit, 1, n, f);
    *col += w;
}

void textwrap_text(FILE *f, int *col, int width, int indent,
                   const char *text)
{
    bool first = true;
    while (*text != '\0') {
        size_t n = 0;
        for (int depth = 0; text[n] != '\0' && text[n] != '\n' &&
                            (text[n] != ' ' || depth > 0);
             n++)
            depth += (text[n] == '[') - (text[n] == ']');
        textwrap_unit(f, col, width, indent, text, n, first);
        first = text[n] == '\n';
        if (first) {
            fprintf(f, "\n%*s", indent, "");
            *col = indent;
        }
        text += n + (text[n] != '\0');
    }
}
