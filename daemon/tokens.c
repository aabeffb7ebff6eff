/* Bearer tokens from a file (see tokens.h). */
#include "tokens.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "readfile.h"

/* What separates a line's fields (a trailing CR is cut first). */
#define BLANKS " \t"

#define FILE_MAX (64 * 1024)

/* A token zero-padded to the full width, so that comparing two costs the
 * same whatever they hold. */
struct token {
    unsigned char bytes[TOKENS_MAX_LEN];
    size_t len;
    char name[TOKENS_NAME_MAX + 1]; /* the identity: see tokens.h */
};

struct set {
    size_t n;
    struct token tok[TOKENS_MAX_COUNT];
};

struct tokens {
    const char *path;
    pthread_mutex_t lock;
    struct set set;
};

static bool alnum(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c >= '0' && c <= '9');
}

static bool token_char(unsigned char c)
{
    return alnum(c) || (c != '\0' && strchr("-._~+/=", c) != NULL);
}

static bool name_char(unsigned char c)
{
    return alnum(c) || (c != '\0' && strchr("-._:@", c) != NULL);
}

/* Whether every one of the n bytes of p passes ok. */
static bool all_of(const char *p, size_t n, bool (*ok)(unsigned char))
{
    for (size_t i = 0; i < n; i++)
        if (!ok((unsigned char)p[i]))
            return false;
    return true;
}

/* Checks one line's token (and name, or NULL) and adds it to *set.
 * Messages name the line, never the token. */
static int add(const char *path, int lineno, const char *name,
               const char *tok, struct set *set, char *errmsg, size_t len)
{
    size_t n = strlen(tok);
    if (!all_of(tok, n, token_char)) {
        snprintf(errmsg, len,
                 "%s: line %d: a token may hold only A-Z a-z 0-9 and -._~+/=",
                 path, lineno);
        return -1;
    }
    if (n > TOKENS_MAX_LEN) {
        snprintf(errmsg, len, "%s: line %d: token longer than %d", path,
                 lineno, TOKENS_MAX_LEN);
        return -1;
    }
    size_t name_len = name != NULL ? strlen(name) : 0;
    if (!all_of(name, name_len, name_char)) {
        snprintf(errmsg, len,
                 "%s: line %d: a name may hold only A-Z a-z 0-9 and -._:@",
                 path, lineno);
        return -1;
    }
    if (name_len > TOKENS_NAME_MAX) {
        snprintf(errmsg, len, "%s: line %d: name longer than %d", path,
                 lineno, TOKENS_NAME_MAX);
        return -1;
    }
    if (set->n == TOKENS_MAX_COUNT) {
        snprintf(errmsg, len, "%s: more than %d tokens", path,
                 TOKENS_MAX_COUNT);
        return -1;
    }
    struct token *t = &set->tok[set->n];
    memset(t, 0, sizeof(*t));
    memcpy(t->bytes, tok, n);
    t->len = n;
    if (name != NULL)
        memcpy(t->name, name, name_len);
    else
        snprintf(t->name, sizeof(t->name), "token-%d", lineno);
    for (size_t k = 0; k < set->n; k++) {
        const struct token *o = &set->tok[k];
        bool same_name = strcmp(o->name, t->name) == 0;
        if (same_name || (o->len == n && memcmp(o->bytes, tok, n) == 0)) {
            snprintf(errmsg, len, "%s: line %d: %s as an earlier line",
                     path, lineno,
                     same_name ? "the same name" : "the same token");
            explicit_bzero(t, sizeof(*t));
            return -1;
        }
    }
    set->n++;
    return 0;
}

/* Parses the file's text into *set. Messages name lines, never tokens. */
static int parse(const char *path, char *text, struct set *set, char *errmsg,
                 size_t len)
{
    set->n = 0;
    int lineno = 0;
    for (char *line = text, *next; line != NULL; line = next) {
        lineno++;
        next = strchr(line, '\n');
        if (next != NULL)
            *next++ = '\0';
        size_t n = strlen(line);
        while (n > 0 && strchr(" \t\r", line[n - 1]) != NULL)
            line[--n] = '\0';
        char *rest = line;
        char *first = readfile_field(&rest, BLANKS);
        if (first == NULL || first[0] == '#')
            continue;
        char *second = readfile_field(&rest, BLANKS);
        if (readfile_field(&rest, BLANKS) != NULL) {
            snprintf(errmsg, len,
                     "%s: line %d: want TOKEN, or NAME and TOKEN separated "
                     "by blanks",
                     path, lineno);
            return -1;
        }
        if (add(path, lineno, second != NULL ? first : NULL,
                second != NULL ? second : first, set, errmsg, len) != 0)
            return -1;
    }
    if (set->n == 0) {
        snprintf(errmsg, len, "%s: no token in the file", path);
        return -1;
    }
    return 0;
}

/* Parses a file's text (borrowed) into a new set; the caller frees it.
 * parse() cuts lines in place, so it works on a NUL-terminated copy. */
static struct set *parse_set(const char *name, const char *text,
                             size_t text_len, char *errmsg, size_t len)
{
    if (text_len > FILE_MAX) {
        snprintf(errmsg, len, "%s: larger than %d bytes", name, FILE_MAX);
        return NULL;
    }
    char *copy = malloc(text_len + 1);
    struct set *set = malloc(sizeof(*set));
    int rc = -1;
    if (copy == NULL || set == NULL) {
        snprintf(errmsg, len, "out of memory");
    } else {
        memcpy(copy, text, text_len);
        copy[text_len] = '\0';
        rc = parse(name, copy, set, errmsg, len);
    }
    if (copy != NULL) {
        explicit_bzero(copy, text_len + 1); /* no copies of tokens left about */
        free(copy);
    }
    if (rc != 0 && set != NULL) {
        explicit_bzero(set, sizeof(*set)); /* the tokens before a bad line */
        free(set);
        set = NULL;
    }
    return set;
}

/* Loads the file into a new set: reads it, then parses the text. */
static struct set *load_set(const char *path, char *errmsg, size_t len)
{
    size_t got = 0;
    char *text = readfile(path, FILE_MAX, S_IRWXG | S_IRWXO,
                          "group or others at it", "600", &got, errmsg, len);
    if (text == NULL)
        return NULL;
    struct set *set = parse_set(path, text, got, errmsg, len);
    explicit_bzero(text, FILE_MAX + 1);
    free(text);
    return set;
}

/* A new struct tokens holding *set (which it copies and wipes) and path
 * (borrowed; NULL: nothing to reload). Frees set. */
static struct tokens *tokens_new(const char *path, struct set *set,
                                 char *errmsg, size_t len)
{
    struct tokens *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        snprintf(errmsg, len, "out of memory");
        explicit_bzero(set, sizeof(*set));
        free(set);
        return NULL;
    }
    t->path = path;
    pthread_mutex_init(&t->lock, NULL);
    t->set = *set;
    explicit_bzero(set, sizeof(*set));
    free(set);
    return t;
}

struct tokens *tokens_load(const char *path, char *errmsg, size_t len)
{
    struct set *set = load_set(path, errmsg, len);
    return set != NULL ? tokens_new(path, set, errmsg, len) : NULL;
}

struct tokens *tokens_parse(const char *name, const char *text,
                            size_t text_len, char *errmsg, size_t len)
{
    struct set *set = parse_set(name, text, text_len, errmsg, len);
    return set != NULL ? tokens_new(NULL, set, errmsg, len) : NULL;
}

int tokens_reload(struct tokens *t, char *errmsg, size_t len)
{
    if (t->path == NULL) {
        snprintf(errmsg, len, "no token file to reload");
        return -1;
    }
    struct set *set = load_set(t->path, errmsg, len);
    if (set == NULL)
        return -1;
    pthread_mutex_lock(&t->lock);
    t->set = *set;
    pthread_mutex_unlock(&t->lock);
    explicit_bzero(set, sizeof(*set));
    free(set);
    return 0;
}

/* Equal in time that depends only on the width. */
static bool same(const struct token *a, const struct token *b)
{
    unsigned diff = (unsigned)(a->len ^ b->len);
    for (size_t i = 0; i < TOKENS_MAX_LEN; i++)
        diff |= a->bytes[i] ^ b->bytes[i];
    return diff == 0;
}

bool tokens_check(struct tokens *t, const char *value, size_t value_len,
                  char name[TOKENS_NAME_MAX + 1])
{
    /* "Bearer" (any case), spaces, the token. */
    if (value_len < 7 || strncasecmp(value, "bearer", 6) != 0 ||
        value[6] != ' ')
        return false;
    size_t i = 6;
    while (i < value_len && value[i] == ' ')
        i++;
    size_t n = value_len - i;
    if (n == 0 || n > TOKENS_MAX_LEN)
        return false;
    struct token given;
    memset(given.bytes, 0, sizeof(given.bytes));
    memcpy(given.bytes, value + i, n);
    given.len = n;
    /* Every token is compared, and the match picked without a branch on
     * it, so that the time says nothing about which one matched. */
    size_t found = 0, which = 0;
    pthread_mutex_lock(&t->lock);
    for (size_t k = 0; k < t->set.n; k++) {
        size_t first = (size_t)same(&given, &t->set.tok[k]) & ~found;
        size_t mask = (size_t)0 - first;
        which = (which & ~mask) | (k & mask);
        found |= first;
    }
    if (name != NULL)
        memcpy(name, t->set.tok[which].name, TOKENS_NAME_MAX + 1);
    pthread_mutex_unlock(&t->lock);
    explicit_bzero(given.bytes, sizeof(given.bytes));
    if (name != NULL && !found)
        name[0] = '\0';
    return found != 0;
}

size_t tokens_count(struct tokens *t)
{
    pthread_mutex_lock(&t->lock);
    size_t n = t->set.n;
    pthread_mutex_unlock(&t->lock);
    return n;
}

void tokens_free(struct tokens *t)
{
    if (t == NULL)
        return;
    pthread_mutex_destroy(&t->lock);
    explicit_bzero(&t->set, sizeof(t->set));
    free(t);
}
