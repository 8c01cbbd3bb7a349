/* cli.h - the `nightshift` subcommands. Each takes argv with argv[0] = the
 * subcommand name, prints its own usage on bad arguments, and returns the
 * process exit code (0 ok, 1 failure, 2 usage). main.c dispatches to them. */
#ifndef NIGHTSHIFT_CLI_H
#define NIGHTSHIFT_CLI_H

int grad_main(int argc, char **argv);      /* grad.c: loss and gradients of one batch */
int cost_main(int argc, char **argv);      /* cost.c: parameter, byte and FLOP counts */
int prep_main(int argc, char **argv);      /* prep.c: text in, tokenizer + dataset out */
int calibrate_main(int argc, char **argv); /* calibrate.c: measure the sgemm peak for MFU */
int train_main(int argc, char **argv);     /* train.c: one experiment in the foreground */
int sample_main(int argc, char **argv);    /* sample.c: text from a saved checkpoint */
int bench_main(int argc, char **argv);     /* bench.c: time full training steps */
int floor_main(int argc, char **argv);     /* floor.c: the address space of N threads */

/* threads.c; main.c calls it before an engine command. The engine's OpenMP
 * team (BLAS included) should sleep, not spin, between parallel regions: the
 * machine is shared (daemon slots, other work), and a thread spinning for a
 * descheduled partner costs a time slice per region (steps 5-10x slower
 * under load in tests/bench) where sleeping costs a futex wake. libgomp reads
 * OMP_WAIT_POLICY once, when it is loaded, so when the variable is unset this
 * sets it to PASSIVE and re-execs the program with the same argv. It returns
 * only when the variable was already set (the caller's choice stands) or the
 * exec failed. */
void threads_passive_wait(char **argv);

#endif
