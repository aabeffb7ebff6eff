/* Small configuration files, read whole (see readfile.h). */
#include "readfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Checks the open file fd; 0, or -1 with errmsg set. */
static int check(int fd, const char *path, size_t max, mode_t forbid,
                 const char *who, const char *mode, char *errmsg, size_t len)
{
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(errmsg, len, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(errmsg, len, "%s: not a regular file", path);
        return -1;
    }
    if ((st.st_mode & forbid) != 0) {
        snprintf(errmsg, len, "%s: mode %03o lets %s (chmod %s %s)", path,
                 (unsigned)(st.st_mode & 0777), who, mode, path);
        return -1;
    }
    if ((unsigned long long)st.st_size > max) {
        snprintf(errmsg, len, "%s: larger than %zu bytes", path, max);
        return -1;
    }
    return 0;
}

/* Frees buf (max + 1 bytes), wiped: it may hold part of a secret. */
static void drop(char *buf, size_t max)
{
    explicit_bzero(buf, max + 1);
    free(buf);
}

char *readfile(const char *path, size_t max, mode_t forbid, const char *who,
               const char *mode, size_t *got, char *errmsg, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(errmsg, len, "%s: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    if (check(fd, path, max, forbid, who, mode, errmsg, len) == 0 &&
        (buf = malloc(max + 1)) == NULL)
        snprintf(errmsg, len, "out of memory");
    size_t n = 0;
    while (buf != NULL && n <= max) {
        ssize_t r = read(fd, buf + n, max + 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            snprintf(errmsg, len, "%s: %s", path, strerror(errno));
            drop(buf, max);
            buf = NULL;
        }
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    if (buf != NULL && n > max) { /* it grew since fstat */
        snprintf(errmsg, len, "%s: larger than %zu bytes", path, max);
        drop(buf, max);
        buf = NULL;
    }
    if (buf != NULL) {
        buf[n] = '\0';
        *got = n;
    }
    return buf;
}

char *readfile_field(char **p, const char *blanks)
{
    char *f = *p + strspn(*p, blanks);
    if (*f == '\0')
        return NULL;
    char *end = f + strcspn(f, blanks);
    *p = end;
    if (*end != '\0') {
        *end = '\0';
        *p = end + 1;
    }
    return f;
}
