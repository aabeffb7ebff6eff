/* The policy file: its format, its errors, what it allows, reloads, and
 * the denial counters. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "policy.h"

static char dir[] = "/tmp/test-policy-XXXXXX";
static char path[256];

static void write_file(const char *text, mode_t mode)
{
    if (path[0] == '\0') {
        CHECK(mkdtemp(dir) != NULL);
        snprintf(path, sizeof(path), "%s/policy", dir);
    }
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
    CHECK(chmod(path, mode) == 0);
}

static void cleanup(void)
{
    unlink(path);
    rmdir(dir);
}

static struct policy *parse(const char *text, char *err, size_t len)
{
    return policy_parse("policy", text, strlen(text), err, len);
}

/* A decoded request of op by identity (session and owner borrowed). */
static struct request call(enum request_op op, const char *identity,
                           const char *session, const char *owner)
{
    struct request r;
    memset(&r, 0, sizeof(r));
    r.op = op;
    snprintf(r.identity, sizeof(r.identity), "%s", identity);
    r.session = session;
    r.session_len = session != NULL ? strlen(session) : 0;
    r.owner = owner;
    r.owner_len = owner != NULL ? strlen(owner) : 0;
    return r;
}

/* Whether p allows op by identity on session with owner. */
static bool allows(struct policy *p, enum request_op op, const char *identity,
                   const char *session, const char *owner)
{
    struct request r = call(op, identity, session, owner);
    bool ok = policy_authorize(p, &r);
    CHECK(ok || r.status == REPLY_DENIED);
    CHECK(ok || strstr(r.reason, "may not") != NULL ||
          strstr(r.reason, "has no rule") != NULL);
    policy_release(r.list_rule);
    return ok;
}

static const char two_tenants[] =
    "# two tenants and an operator\n"
    "\n"
    "  team-a   sessions=a/,shared/a- owners=host-a  admin=read  \r\n"
    "spiffe://test/team-b\tsessions=b/ owners=host-b,batch-b # trailing\n"
    "ops sessions=* owners=* admin=write\n"
    "monitor sessions=* admin=read\n"
    "* sessions=public/ owners=*\n";

TEST(rules_allow_their_prefixes_only)
{
    char err[512];
    struct policy *p = parse(two_tenants, err, sizeof(err));
    CHECK(p != NULL);
    if (p == NULL) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    CHECK_EQ_I64(policy_count(p), 5);
    /* Sessions and owners both must match, for every lease call. */
    for (enum request_op op = OP_ACQUIRE; op <= OP_RELEASE; op++) {
        CHECK(allows(p, op, "team-a", "a/1", "host-a-7"));
        CHECK(allows(p, op, "team-a", "shared/a-9", "host-a"));
        CHECK(!allows(p, op, "team-a", "b/1", "host-a"));
        CHECK(!allows(p, op, "team-a", "shared/b-1", "host-a"));
        CHECK(!allows(p, op, "team-a", "a/1", "host-b"));
        CHECK(!allows(p, op, "team-a", "a", "host-a")); /* shorter */
        CHECK(allows(p, op, "spiffe://test/team-b", "b/x", "batch-b1"));
        CHECK(!allows(p, op, "spiffe://test/team-b", "a/x", "host-b"));
        CHECK(allows(p, op, "ops", "anything", "anyone"));
        /* No owners= field: no lease call at all. */
        CHECK(!allows(p, op, "monitor", "a/1", "host-a"));
        /* Everyone else gets the * rule, the empty identity too. */
        CHECK(allows(p, op, "stranger", "public/1", "x"));
        CHECK(allows(p, op, "", "public/1", "x"));
        CHECK(!allows(p, op, "stranger", "a/1", "host-a"));
    }
    /* Identities match exactly. */
    CHECK(!allows(p, OP_ACQUIRE, "TEAM-A", "a/1", "host-a"));
    CHECK(!allows(p, OP_ACQUIRE, "team-a ", "a/1", "host-a"));
    /* The admin service: admin=read, and only one's own sessions. */
    CHECK(allows(p, OP_STATS, "team-a", NULL, NULL));
    CHECK(allows(p, OP_GET, "team-a", "a/1", NULL));
    CHECK(!allows(p, OP_GET, "team-a", "b/1", NULL));
    CHECK(!allows(p, OP_STATS, "spiffe://test/team-b", NULL, NULL));
    CHECK(!allows(p, OP_GET, "stranger", "public/1", NULL));
    CHECK(allows(p, OP_GET, "monitor", "b/1", NULL));
    /* Revoke: admin=write (which reads too), its own sessions only. */
    CHECK(allows(p, OP_REVOKE, "ops", "b/1", NULL));
    CHECK(allows(p, OP_GET, "ops", "b/1", NULL));
    CHECK(allows(p, OP_STATS, "ops", NULL, NULL));
    CHECK(!allows(p, OP_REVOKE, "monitor", "b/1", NULL));
    CHECK(!allows(p, OP_REVOKE, "team-a", "a/1", NULL));
    CHECK(!allows(p, OP_REVOKE, "stranger", "public/1", NULL));
    policy_free(p);
}

TEST(denials_say_why_and_who)
{
    char err[512];
    struct policy *p = parse("alice sessions=a/ owners=al\n", err,
                             sizeof(err));
    CHECK(p != NULL);
    struct request r = call(OP_ACQUIRE, "alice", "b/1", "al");
    CHECK(!policy_authorize(p, &r));
    CHECK_EQ_I64(r.status, REPLY_DENIED);
    CHECK_STR(r.reason, "identity \"alice\" may not use this session_id");
    r = call(OP_RENEW, "alice", "a/1", "bob");
    CHECK(!policy_authorize(p, &r));
    CHECK_STR(r.reason, "identity \"alice\" may not use this owner");
    r = call(OP_LIST, "alice", "", NULL);
    CHECK(!policy_authorize(p, &r));
    CHECK_STR(r.reason, "identity \"alice\" may not call the admin service");
    r = call(OP_REVOKE, "alice", "a/1", NULL);
    CHECK(!policy_authorize(p, &r));
    CHECK_STR(r.reason, "identity \"alice\" may not call the admin service");
    policy_free(p);
    p = parse("alice sessions=a/ admin=read\n", err, sizeof(err));
    r = call(OP_REVOKE, "alice", "a/1", NULL);
    CHECK(!policy_authorize(p, &r));
    CHECK_STR(r.reason, "identity \"alice\" may not revoke (admin=write)");
    policy_free(p);
    p = parse("alice sessions=a/ owners=al admin=write\n", err, sizeof(err));
    r = call(OP_REVOKE, "alice", "b/1", NULL);
    CHECK(!policy_authorize(p, &r));
    CHECK_STR(r.reason, "identity \"alice\" may not use this session_id");
    r = call(OP_ACQUIRE, "bob", "a/1", "al");
    CHECK(!policy_authorize(p, &r));
    CHECK_STR(r.reason, "identity \"bob\" has no rule in the policy");
    r = call(OP_ACQUIRE, "", "a/1", "al");
    CHECK(!policy_authorize(p, &r));
    CHECK_STR(r.reason, "a caller without an identity has no rule in the "
                        "policy");
    policy_free(p);
}

TEST(list_sees_only_the_callers_sessions)
{
    char err[512];
    struct policy *p = parse("one sessions=t/a/ admin=read\n"
                             "two sessions=t/a/,t/b/,u/ admin=read\n",
                             err, sizeof(err));
    CHECK(p != NULL);
    /* A prefix within the caller's: no limit needed. */
    struct request r = call(OP_LIST, "one", "t/a/x", NULL);
    CHECK(policy_authorize(p, &r));
    CHECK(r.list_rule == NULL);
    /* A wider one reaching one prefix of the caller's: narrowed to it. */
    r = call(OP_LIST, "one", "t/", NULL);
    CHECK(policy_authorize(p, &r));
    CHECK(r.list_rule != NULL);
    CHECK_EQ_I64(r.session_len, 4);
    CHECK(memcmp(r.session, "t/a/", 4) == 0);
    policy_release(r.list_rule);
    /* Reaching several: listed whole, rows filtered. */
    r = call(OP_LIST, "two", "t", NULL);
    CHECK(policy_authorize(p, &r));
    CHECK(r.list_rule != NULL);
    CHECK_EQ_I64(r.session_len, 1);
    CHECK(policy_visible(r.list_rule, "t/a/1", 5));
    CHECK(policy_visible(r.list_rule, "t/b/", 4));
    CHECK(!policy_visible(r.list_rule, "t/c/1", 5));
    CHECK(!policy_visible(r.list_rule, "t/", 2));
    /* The rule outlives its policy while the List holds it. */
    policy_free(p);
    CHECK(policy_visible(r.list_rule, "u/1", 3));
    policy_release(r.list_rule);
    /* Reaching none of them: everything listed is hidden. */
    p = parse("one sessions=t/a/ admin=read\n", err, sizeof(err));
    r = call(OP_LIST, "one", "v/", NULL);
    CHECK(policy_authorize(p, &r));
    CHECK(r.list_rule != NULL);
    CHECK_EQ_I64(r.session_len, 2);
    CHECK(!policy_visible(r.list_rule, "v/1", 3));
    policy_release(r.list_rule);
    policy_free(p);
}

/* Parsing text fails with a message that holds want. */
static void refused(const char *text, const char *want)
{
    char err[512] = "";
    struct policy *p = parse(text, err, sizeof(err));
    CHECK(p == NULL);
    if (strstr(err, want) == NULL) {
        fprintf(stderr, "for %s\n  got:  %s\n  want: %s\n", text, err, want);
        CHECK(strstr(err, want) != NULL);
    }
    policy_free(p);
}

TEST(bad_lines_are_named_by_file_and_line)
{
    refused("", "policy: no rule in the file");
    refused("# only a comment\n\n", "policy: no rule in the file");
    refused("a sessions=x/\nb session=x/\n",
            "policy: line 2: unknown field (want sessions=, owners= or "
            "admin=): session");
    refused("a sessions=x/ sessions=y/\n",
            "policy: line 1: a field given twice: sessions");
    refused("a sessions=\n", "policy: line 1: sessions=: an empty prefix");
    refused("a owners=\"\"\n", "policy: line 1: owners=: an empty prefix");
    refused("a sessions=x/,,y/\n", "line 1: sessions=: an empty prefix");
    refused("a sessions=x/,\n", "line 1: sessions=: an empty prefix");
    refused("a sessions=\"x/\"\n", "line 1: sessions=: prefixes are "
                                   "written without quotes");
    refused("a sessions=x/*\n", "line 1: sessions=: * stands alone");
    refused("a sessions=*,x/\n", "line 1: sessions=: * stands alone");
    refused("a admin=all\n", "line 1: admin= wants none, read or write");
    refused("a admin\n", "line 1: want IDENTITY followed by sessions=, "
                         "owners= or admin= fields, not admin");
    refused("sessions=x/ owners=y\n",
            "line 1: a rule starts with the identity it is for");
    refused("\n\nal\"ice sessions=x/\n", "line 3: an identity is 1 to 256");
    refused("a sessions=x/\n# c\nb owners=y\na owners=z\n",
            "line 4: a second rule for the same identity (the first is "
            "on line 1)");
    static const char nul[] = "a sessions=x/\nb sessions=y/\0\n";
    char err[512];
    CHECK(policy_parse("policy", nul, sizeof(nul) - 1, err, sizeof(err)) ==
          NULL);
    CHECK(strstr(err, "policy: line 2: a NUL byte") != NULL);
    char prefix[600];
    memset(prefix, 'p', sizeof(prefix) - 1);
    prefix[sizeof(prefix) - 1] = '\0';
    char line[700];
    snprintf(line, sizeof(line), "a sessions=%s\n", prefix);
    refused(line, "line 1: sessions=: a prefix longer than the field");
    char id[300];
    memset(id, 'i', 257);
    snprintf(id + 257, sizeof(id) - 257, " sessions=x/\n");
    refused(id, "line 1: an identity is 1 to 256");
    /* A huge file: refused whole, nothing parsed. */
    size_t n = POLICY_FILE_MAX + 1;
    char *huge = malloc(n);
    CHECK(huge != NULL);
    memset(huge, '#', n);
    CHECK(policy_parse("policy", huge, n, err, sizeof(err)) == NULL);
    CHECK(strstr(err, "policy: larger than 1048576 bytes") != NULL);
    free(huge);
}

TEST(load_checks_the_mode_and_reload_keeps_the_old_on_error)
{
    char err[512];
    write_file("a sessions=x/ owners=o\n", 0664);
    CHECK(policy_load(path, err, sizeof(err)) == NULL);
    CHECK(strstr(err, "lets group or others write it (chmod go-w") != NULL);
    write_file("a sessions=x/ owners=o\n", 0644); /* readable is fine */
    struct policy *p = policy_load(path, err, sizeof(err));
    CHECK(p != NULL);
    CHECK(allows(p, OP_ACQUIRE, "a", "x/1", "o"));
    CHECK(!allows(p, OP_ACQUIRE, "b", "x/1", "o"));
    write_file("a sessions=y/ owners=o\nb sessions=x/ owners=o\n", 0600);
    CHECK_EQ_I64(policy_reload(p, err, sizeof(err)), 0);
    CHECK_EQ_I64(policy_count(p), 2);
    CHECK(!allows(p, OP_ACQUIRE, "a", "x/1", "o"));
    CHECK(allows(p, OP_ACQUIRE, "b", "x/1", "o"));
    /* Broken, too open or gone: the rules in force stay. */
    write_file("a sessions=y/ owners=o\nc bogus\n", 0600);
    CHECK_EQ_I64(policy_reload(p, err, sizeof(err)), -1);
    CHECK(strstr(err, "policy: line 2: want IDENTITY") != NULL);
    CHECK(strncmp(err, path, strlen(path)) == 0);
    write_file("c sessions=* owners=*\n", 0666);
    CHECK_EQ_I64(policy_reload(p, err, sizeof(err)), -1);
    unlink(path);
    CHECK_EQ_I64(policy_reload(p, err, sizeof(err)), -1);
    CHECK(allows(p, OP_ACQUIRE, "b", "x/1", "o"));
    CHECK(!allows(p, OP_ACQUIRE, "c", "x/1", "o"));
    CHECK_EQ_I64(policy_count(p), 2);
    policy_free(p);
    cleanup();
}

/* The metrics text of p. */
static char *metrics_of(struct policy *p)
{
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    CHECK(f != NULL);
    policy_write_metrics(p, f);
    fclose(f);
    return text;
}

TEST(denials_are_counted_by_the_rule_that_refused_them)
{
    char err[512];
    write_file("a sessions=x/ owners=o\n* sessions=pub/ owners=o\n", 0600);
    struct policy *p = policy_load(path, err, sizeof(err));
    CHECK(p != NULL);
    CHECK(!allows(p, OP_ACQUIRE, "a", "y/1", "o"));
    CHECK(!allows(p, OP_RENEW, "a", "x/1", "p"));
    CHECK(!allows(p, OP_ACQUIRE, "zed", "x/1", "o"));
    CHECK(allows(p, OP_ACQUIRE, "a", "x/1", "o"));
    char *m = metrics_of(p);
    CHECK(strstr(m, "# TYPE leased_permission_denied_total counter\n"));
    CHECK(strstr(m, "leased_permission_denied_total{identity=\"a\"} 2\n"));
    CHECK(strstr(m, "leased_permission_denied_total{identity=\"*\"} 1\n"));
    free(m);
    /* A reload keeps the counts; an identity without any rule counts as
     * "*" whether or not there is a * rule. */
    write_file("a sessions=x/ owners=o\nb sessions=x/ owners=o\n", 0600);
    CHECK_EQ_I64(policy_reload(p, err, sizeof(err)), 0);
    CHECK(!allows(p, OP_ACQUIRE, "zed", "pub/1", "o"));
    CHECK(!allows(p, OP_ACQUIRE, "b", "y/1", "o"));
    m = metrics_of(p);
    CHECK(strstr(m, "leased_permission_denied_total{identity=\"a\"} 2\n"));
    CHECK(strstr(m, "leased_permission_denied_total{identity=\"b\"} 1\n"));
    CHECK(strstr(m, "leased_permission_denied_total{identity=\"*\"} 2\n"));
    free(m);
    policy_free(p);
    cleanup();
}

CHECK_MAIN(rules_allow_their_prefixes_only, denials_say_why_and_who,
           list_sees_only_the_callers_sessions,
           bad_lines_are_named_by_file_and_line,
           load_checks_the_mode_and_reload_keeps_the_old_on_error,
           denials_are_counted_by_the_rule_that_refused_them)
