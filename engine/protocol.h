/* protocol.h - the worker protocol: what `nightshift train` (engine/train.c)
 * promises whoever runs it, written once for both sides. The daemon's two
 * executors read it: the local worker (daemon/exec/worker.c) from a pipe,
 * a Slurm job (daemon/exec/slurm.c) from a file; daemon/exec/executor.c
 * turns what they saw into an experiment's status.
 *
 * Progress: one JSON object a line, each with PROTO_KEY_EVENT naming it:
 *   PROTO_EV_START   once the model is built (parameter counts, budget)
 *   PROTO_EV_STEP    after every optimiser step (the PROTO_STEP_* keys)
 *   PROTO_EV_EVAL    after the evaluation
 *   PROTO_EV_TEST    after it: the sealed test split's figure (the
 *                    PROTO_TEST_* keys), or a null PROTO_TEST_BPB and a
 *                    PROTO_KEY_REASON; the daemon stores it apart from the
 *                    result (the store's test_results), for no ranking
 *   PROTO_EV_RESULT  last: PROTO_KEY_STATUS is PROTO_SUCCEEDED with the
 *                    fields of result_fields.h (and a PROTO_KEY_REASON when
 *                    something that does not undo the result went wrong: a
 *                    checkpoint --save could not write), or PROTO_FAILED,
 *                    PROTO_DIVERGED or PROTO_OOM with a PROTO_KEY_REASON.
 *                    A line that is not one JSON object is garbage, skipped.
 *
 * Exit code: PROTO_EXIT_*, below. A succeeded run exits PROTO_EXIT_OK after
 * its succeeded result line; an exit 0 without one is a failure. */
#ifndef NIGHTSHIFT_PROTOCOL_H
#define NIGHTSHIFT_PROTOCOL_H

#define PROTO_EXIT_OK       0 /* the run succeeded */
#define PROTO_EXIT_FAILED   1 /* bad input, I/O */
#define PROTO_EXIT_USAGE    2 /* bad arguments */
#define PROTO_EXIT_DIVERGED 3 /* the loss exploded or is not finite */
#define PROTO_EXIT_OOM      4 /* an allocation failed (under RLIMIT_AS, say) */
/* The exit codes for people (usage texts, README). */
#define PROTO_EXIT_HELP "0 succeeded, 1 failed, 2 usage, 3 diverged, 4 out of memory"

/* The keys every line may carry, and the events. */
#define PROTO_KEY_EVENT  "event"
#define PROTO_KEY_STATUS "status"
#define PROTO_KEY_REASON "reason"
#define PROTO_EV_START   "start"
#define PROTO_EV_STEP    "step"
#define PROTO_EV_EVAL    "eval"
#define PROTO_EV_TEST    "test"
#define PROTO_EV_RESULT  "result"

/* The result line's statuses. */
#define PROTO_SUCCEEDED "succeeded"
#define PROTO_FAILED    "failed"
#define PROTO_DIVERGED  "diverged"
#define PROTO_OOM       "oom"

/* A step line's keys that the daemon reads (metrics, live progress). */
#define PROTO_STEP_STEP        "step"             /* optimiser steps done */
#define PROTO_STEP_PROGRESS    "progress"         /* fraction of the budget spent, 0..1 */
#define PROTO_STEP_SECONDS     "training_seconds" /* training time so far */
#define PROTO_STEP_LOSS        "loss"             /* this step's mean loss */
#define PROTO_STEP_SMOOTH_LOSS "smooth_loss"      /* debiased moving average */
#define PROTO_STEP_LRM         "lrm"              /* learning-rate multiplier */
#define PROTO_STEP_TOK_S       "tok_s"            /* tokens per second of this step */
#define PROTO_STEP_MFU         "mfu"              /* percent of the peak */
#define PROTO_STEP_REMAINING_S "remaining_s"      /* seconds left (estimated for tokens) */

/* The test line's keys. */
#define PROTO_TEST_BPB     "test_bpb" /* bits per byte on the test split, or null */
#define PROTO_TEST_TOKENS  "tokens"   /* target tokens counted */
#define PROTO_TEST_SECONDS "seconds"  /* the evaluation's time */

#endif
