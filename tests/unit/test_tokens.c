/* Bearer tokens: the file's rules, the header's form, reloads. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "tokens.h"

static char dir[] = "/tmp/test-tokens-XXXXXX";
static char path[256];

static void write_file(const char *text, mode_t mode)
{
    if (path[0] == '\0') {
        CHECK(mkdtemp(dir) != NULL);
        snprintf(path, sizeof(path), "%s/tokens", dir);
    }
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
    CHECK(chmod(path, mode) == 0);
}

static struct tokens *load(const char *text, mode_t mode, char *err,
                           size_t len)
{
    write_file(text, mode);
    return tokens_load(path, err, len);
}

static bool check(struct tokens *t, const char *value)
{
    return tokens_check(t, value, strlen(value), NULL);
}

static void cleanup(void)
{
    unlink(path);
    rmdir(dir);
}

TEST(file_format)
{
    char err[512];
    struct tokens *t = load("# tokens for leased\n\n  alpha-1  \r\n"
                            "\tbeta.2_~+/=\n#gamma\n",
                            0600, err, sizeof(err));
    CHECK(t != NULL);
    CHECK_EQ_I64(tokens_count(t), 2);
    CHECK(check(t, "Bearer alpha-1"));
    CHECK(check(t, "Bearer beta.2_~+/="));
    CHECK(!check(t, "Bearer gamma")); /* a comment, not a token */
    CHECK(!check(t, "Bearer # tokens for leased"));
    tokens_free(t);
    cleanup();
}

/* "NAME TOKEN" names a token; a token alone is named after its line. The
 * check says whose token it was. */
TEST(named_tokens)
{
    char err[512];
    struct tokens *t = load("# team tokens\nbilling  tok-b1\n"
                            "ops@example.org\ttok-o1 \nlegacy-token\n",
                            0600, err, sizeof(err));
    CHECK(t != NULL);
    CHECK_EQ_I64(tokens_count(t), 3);
    char name[TOKENS_NAME_MAX + 1];
    CHECK(tokens_check(t, "Bearer tok-b1", 13, name));
    CHECK_STR(name, "billing");
    CHECK(tokens_check(t, "Bearer tok-o1", 13, name));
    CHECK_STR(name, "ops@example.org");
    CHECK(tokens_check(t, "Bearer legacy-token", 19, name));
    CHECK_STR(name, "token-4");
    CHECK(!tokens_check(t, "Bearer billing", 14, name)); /* a name */
    CHECK_STR(name, "");
    tokens_free(t);
    /* Bad names, a third field, names or tokens twice: refused by line,
     * never showing the token. */
    const struct {
        const char *text, *line, *why;
    } bad[] = {
        {"a t1\nb t2 t3\n", "line 2", "NAME and TOKEN"},
        {"a t1\nb/c t2\n", "line 2", "a name may hold only"},
        {"a t1\na t2\n", "line 2", "the same name"},
        {"a t1\nb t1\n", "line 2", "the same token"},
        {"t1\nt1\n", "line 2", "the same token"},
        {"token-2 t1\nt2\n", "line 2", "the same name"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK(load(bad[i].text, 0600, err, sizeof(err)) == NULL);
        CHECK(strstr(err, bad[i].line) != NULL);
        CHECK(strstr(err, bad[i].why) != NULL);
        CHECK(strstr(err, "t1") == NULL && strstr(err, "t2") == NULL);
    }
    char lng[TOKENS_NAME_MAX + 8];
    memset(lng, 'n', TOKENS_NAME_MAX + 1);
    snprintf(lng + TOKENS_NAME_MAX + 1, 7, " tok\n");
    CHECK(load(lng, 0600, err, sizeof(err)) == NULL);
    CHECK(strstr(err, "name longer than") != NULL);
    lng[TOKENS_NAME_MAX] = ' ';
    t = load(lng, 0600, err, sizeof(err)); /* exactly the longest name */
    CHECK(t != NULL);
    CHECK(tokens_check(t, "Bearer tok", 10, name));
    CHECK_EQ_U64(strlen(name), TOKENS_NAME_MAX);
    tokens_free(t);
    cleanup();
}

TEST(bad_files_refused_without_naming_tokens)
{
    char err[512];
    CHECK(load("\n# only comments\n", 0600, err, sizeof(err)) == NULL);
    CHECK(strstr(err, "no token") != NULL);
    CHECK(load("good\nsecret with space\n", 0600, err, sizeof(err)) == NULL);
    CHECK(strstr(err, "line 2") != NULL);
    CHECK(strstr(err, "secret") == NULL);
    char lng[400];
    memset(lng, 'x', sizeof(lng) - 2);
    lng[sizeof(lng) - 2] = '\n';
    lng[sizeof(lng) - 1] = '\0';
    CHECK(load(lng, 0600, err, sizeof(err)) == NULL);
    CHECK(strstr(err, "line 1") != NULL);
    const mode_t open_modes[] = {0644, 0640, 0604, 0660, 0620, 0602};
    for (size_t i = 0; i < sizeof(open_modes) / sizeof(open_modes[0]); i++) {
        CHECK(load("tok\n", open_modes[i], err, sizeof(err)) == NULL);
        CHECK(strstr(err, "chmod 600") != NULL);
    }
    struct tokens *t = load("tok\n", 0400, err, sizeof(err));
    CHECK(t != NULL);
    tokens_free(t);
    CHECK(tokens_load("/nonexistent/tokens", err, sizeof(err)) == NULL);
    cleanup();
}

TEST(header_form)
{
    char err[512];
    struct tokens *t = load("tok123\n", 0600, err, sizeof(err));
    CHECK(t != NULL);
    CHECK(check(t, "Bearer tok123"));
    CHECK(check(t, "bearer tok123"));
    CHECK(check(t, "BEARER   tok123"));
    CHECK(!check(t, "Bearertok123"));
    CHECK(!check(t, "Bearer "));
    CHECK(!check(t, "Bearer"));
    CHECK(!check(t, "Basic tok123"));
    CHECK(!check(t, "tok123"));
    CHECK(!check(t, "Bearer tok12"));   /* a prefix */
    CHECK(!check(t, "Bearer tok1234")); /* longer */
    CHECK(!check(t, "Bearer tok123 "));
    CHECK(!check(t, "Bearer TOK123"));
    /* Only the given bytes count: an embedded NUL does not cut it short. */
    CHECK(!tokens_check(t, "Bearer tok123\0x", 15, NULL));
    CHECK(tokens_check(t, "Bearer tok123xyz", 13, NULL));
    char lng[600];
    snprintf(lng, sizeof(lng), "Bearer %0500d", 7);
    CHECK(!check(t, lng));
    tokens_free(t);
    cleanup();
}

TEST(reload_replaces_or_keeps)
{
    char err[512];
    struct tokens *t = load("old\n", 0600, err, sizeof(err));
    CHECK(t != NULL);
    write_file("new\nnewer\n", 0600);
    CHECK_EQ_I64(tokens_reload(t, err, sizeof(err)), 0);
    CHECK(!check(t, "Bearer old"));
    CHECK(check(t, "Bearer new") && check(t, "Bearer newer"));
    CHECK_EQ_I64(tokens_count(t), 2);
    /* A broken file keeps what was there. */
    write_file("fine\n", 0644);
    CHECK_EQ_I64(tokens_reload(t, err, sizeof(err)), -1);
    CHECK(check(t, "Bearer new"));
    CHECK(!check(t, "Bearer fine"));
    unlink(path);
    CHECK_EQ_I64(tokens_reload(t, err, sizeof(err)), -1);
    CHECK(check(t, "Bearer newer"));
    tokens_free(t);
    cleanup();
}

CHECK_MAIN(file_format, named_tokens, bad_files_refused_without_naming_tokens,
           header_form,
           reload_replaces_or_keeps)
