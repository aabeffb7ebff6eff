/*
 * CMD's process group, for `leasectl hold` (hold.c): CMD starts as the
 * leader of a group of its own, so that signals reach everything it
 * starts that stays in the group, and hold can tell when that is all
 * gone. What leaves the group (setsid, setpgid) escapes.
 *
 * If leasectl dies (SIGKILL, the OOM killer), the group dies with it: CMD
 * has PR_SET_PDEATHSIG(SIGKILL), and a guardian process (a fork of
 * leasectl that runs no more of its code) waits on a pipe from leasectl
 * and kills the whole group when the pipe closes without a word. CMD is
 * made to wait until the guardian stands before it runs, so that nothing
 * it starts can outlive leasectl. leasectl is a child subreaper, so what CMD leaves behind comes back to
 * it to be reaped.
 *
 * When leasectl has the terminal (it is the foreground of the terminal
 * on its standard input), the group gets it while CMD runs, so that CMD
 * reads it and gets its signals (^C, ^Z) as it would without hold. When
 * the terminal stops CMD (^Z, or reading it from the background),
 * leasectl takes the terminal back and stops too, so that the shell sees
 * the job stopped; continued in the foreground, it gives the terminal to
 * the group again and continues it.
 *
 * Main thread only: PR_SET_PDEATHSIG fires when the thread that forked
 * CMD ends, and the main thread lives as long as leasectl.
 */
#ifndef LEASECTL_GROUP_H
#define LEASECTL_GROUP_H

#include <signal.h>
#include <stdbool.h>
#include <sys/types.h>

struct group {
    pid_t leader;   /* CMD; the group's id */
    pid_t guardian; /* -1 once gone */
    int guardian_fd; /* the guardian's pipe: a byte stands it down */
    int tty;         /* leasectl's terminal (standard input), or -1 */
    bool done;       /* CMD exited; status says how */
    int status;      /* as waitpid gives it */
    bool stopped;    /* ^Z stopped CMD and leasectl: group_resume() */
};

/* Starts argv (argv[0] found in PATH as execvp would) with the
 * environment env and the signal mask mask, every signal in defaults
 * (ndefaults of them) at its default action, as the leader of a new
 * process group, and the guardian beside it. argv, env and mask are
 * borrowed. Returns 0, or an errno: from finding or executing argv[0]
 * (ENOENT, EACCES…), or from fork (EAGAIN, ENOMEM); then nothing
 * runs. */
int group_start(struct group *g, char **argv, char **env,
                const sigset_t *mask, const int *defaults, size_t ndefaults);

/* Sends sig to every process of the group. */
void group_signal(struct group *g, int sig);

/* Reaps every child that changed state (CMD, the guardian, what CMD left
 * behind); when ^Z stopped CMD, stops leasectl too, and on its return
 * sets g->stopped. */
void group_reap(struct group *g);

/* After a ^Z (g->stopped): gives the terminal back to the group if
 * leasectl has it again, and continues the group. */
void group_resume(struct group *g);

/* Whether no process of the group is left (after group_reap). */
bool group_empty(const struct group *g);

/* Once the group is empty: stands the guardian down and takes the
 * terminal back. */
void group_end(struct group *g);

#endif
