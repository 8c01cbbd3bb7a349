/* exec.h - `nightshift exec-limited`, run by the worker supervisor
 * (worker.h) in front of every local worker. */
#ifndef NIGHTSHIFT_EXEC_H
#define NIGHTSHIFT_EXEC_H

/* `nightshift exec-limited [--cpus LIST] [--memory-mb N] [--parent PID] --
 * PROGRAM ARGS...`: set the limits on itself, then execvp. */
int exec_limited_main(int argc, char **argv);

#endif
