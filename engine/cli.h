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
 * exec failed.
 *
 * PASSIVE alone makes a thread sleep the moment it waits, so every region
 * and barrier of a step (about 110 regions in make bench's S, 300 in L) pays
 * a futex wake and the idle CPU's wake-up; when GOMP_SPINCOUNT is unset too,
 * it is set to THREADS_SPIN_COUNT: a thread spins that many times (libgomp
 * counts about 100 per microsecond) before it sleeps, and not at all when
 * the team has more threads than CPUs. Measured with make bench's S, M and
 * L specs on 2 threads (AMD EPYC, Zen 4, 2 CPUs of a virtual machine),
 * `nightshift bench` with each count in turn, medians of the paired ratios
 * of tokens per second: 2000 spins gave +8%, +2%, +2% on the quiet machine
 * (10 pairs) and -11%, -2.5%, -2.5% beside one busy process (5 pairs);
 * 10000 gave +15%, +6%, +5% quiet (16 pairs) but -33%, -13%, -8% beside
 * the busy process (6 pairs), so the default is the smaller count. A machine
 * left to the night alone can set GOMP_SPINCOUNT=10000 itself. */
#define THREADS_SPIN_COUNT "2000"
void threads_passive_wait(char **argv);

#endif
