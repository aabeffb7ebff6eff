/*
 * The main() of a fuzz target built without libFuzzer: replays the files
 * given, and the files in the directories given (in name order), through
 * LLVMFuzzerTestOneInput once each. This is how every normal build runs
 * the committed corpora (`meson test --suite fuzz`), with gcc and under
 * the sanitizers, so a seed that crashes fails CI even where clang's
 * libFuzzer is missing.
 *
 * Each input is copied into a buffer of exactly its size, as libFuzzer
 * does, so that a read past its end trips AddressSanitizer. Replaying
 * nothing is a failure: a corpus that went missing must not pass.
 */
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

/* Reads path into a new buffer of exactly *size bytes (one byte, unused,
 * when empty, so that malloc(0) is never asked for). */
static uint8_t *read_input(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap);
    size_t n;
    while (buf != NULL && (n = fread(buf + len, 1, cap - len, f)) > 0) {
        len += n;
        if (len == cap) {
            uint8_t *bigger = realloc(buf, cap *= 2);
            if (bigger == NULL)
                free(buf);
            buf = bigger;
        }
    }
    bool failed = ferror(f) != 0;
    fclose(f);
    if (buf == NULL || failed) {
        free(buf);
        return NULL;
    }
    uint8_t *exact = malloc(len > 0 ? len : 1);
    if (exact != NULL)
        memcpy(exact, buf, len);
    free(buf);
    *size = len;
    return exact;
}

static int replay_file(const char *path)
{
    size_t size;
    uint8_t *data = read_input(path, &size);
    if (data == NULL) {
        perror(path);
        return -1;
    }
    /* Named before it runs, so that a crash report follows its name. */
    fprintf(stderr, "replay %s (%zu bytes)\n", path, size);
    LLVMFuzzerTestOneInput(data, size);
    free(data);
    return 0;
}

static int skip_dots(const struct dirent *d)
{
    return d->d_name[0] != '.';
}

/* Replays path, a file or a directory of files; adds to *count. */
static int replay(const char *path, size_t *count)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        perror(path);
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        if (replay_file(path) != 0)
            return -1;
        ++*count;
        return 0;
    }
    struct dirent **names;
    int n = scandir(path, &names, skip_dots, alphasort);
    if (n < 0) {
        perror(path);
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < n; i++) {
        char child[4096];
        snprintf(child, sizeof(child), "%s/%s", path, names[i]->d_name);
        if (rc == 0 && replay(child, count) != 0)
            rc = -1;
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE_OR_DIR...\n", argv[0]);
        return 2;
    }
    size_t count = 0;
    for (int i = 1; i < argc; i++) {
        if (replay(argv[i], &count) != 0)
            return 1;
    }
    if (count == 0) {
        fprintf(stderr, "%s: no input to replay\n", argv[0]);
        return 1;
    }
    printf("replayed %zu inputs\n", count);
    return 0;
}
