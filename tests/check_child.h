/*
 * check.h's companion for the cases that must kill the process (an
 * abort() of a failed check): check_in_child(fn) runs fn in a forked
 * child and returns how it ended, for CHECK(WIFSIGNALED(status) ...).
 *
 * Apart from check.h, which every test includes, so that the POSIX
 * headers it needs do not come into tests that name a case after one of
 * their functions (test_conformance's `daemon`).
 */
#ifndef LEASED_CHECK_CHILD_H
#define LEASED_CHECK_CHILD_H

#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

/* Runs fn in a child, with no core file should it die; returns how the
 * child ended (its wait status): exit status 0 if fn returned. */
static int check_in_child(void (*fn)(void))
{
    fflush(NULL); /* or the child writes what is buffered once more */
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit none = {0, 0};
        setrlimit(RLIMIT_CORE, &none);
        fn();
        _exit(0);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    return status;
}

#endif
