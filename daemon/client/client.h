/* client.h - the command-line client of the daemon's HTTP API (libcurl):
 * `nightshift submit`, `ls`, `show`, `best`, `cancel`, `watch`, `export`, `diff` and
 * `report`.
 *
 * Every command talks to one daemon: --url, else $NIGHTSHIFT_URL, else port
 * $NIGHTSHIFT_PORT on 127.0.0.1, else
 * http://127.0.0.1:8080. It sends the bearer token when one is given (--token,
 * --token-file, else $NIGHTSHIFT_TOKEN), waits at most 5 s for the connection
 * and 30 s for the whole reply, and refuses replies over 16 MiB. Each *_main
 * takes argv with argv[0] = the subcommand name (main.c dispatches) and returns
 * one of the CLIENT_EXIT_* codes. */
#ifndef NIGHTSHIFT_CLIENT_H
#define NIGHTSHIFT_CLIENT_H

#define CLIENT_EXIT_OK          0
#define CLIENT_EXIT_API         1 /* the daemon answered with an error, or an unusable reply */
#define CLIENT_EXIT_USAGE       2
#define CLIENT_EXIT_UNREACHABLE 3 /* no connection to the daemon */

int submit_main(int argc, char **argv); /* POST a spec or an array of specs */
int ls_main(int argc, char **argv);     /* list experiments as a table */
int show_main(int argc, char **argv);   /* one experiment: status, spec, result, metrics, log */
int best_main(int argc, char **argv);   /* the best succeeded spec, ready to resubmit */
int leaderboard_main(int argc, char **argv); /* one row per configuration: mean, sd, seeds */
int cancel_main(int argc, char **argv);      /* cancel a queued or running experiment */
int watch_main(int argc, char **argv);       /* live progress of every slot */
int export_main(int argc, char **argv); /* every experiment as CSV, TSV, JSONL or results.tsv */
int diff_main(int argc, char **argv);   /* two experiments' spec differences and results */
int report_main(int argc, char **argv); /* the morning report of one scope, as Markdown */
int mcp_main(int argc, char **argv);    /* the MCP server over stdio, a client of the daemon */
/* `nightshift agent status`: what a running agent (GET on its port) is doing. */
int agent_status_main(int argc, char **argv);
/* `nightshift sample`: with --url, the daemon's state directory as --dir for
 * sample_main (engine/sample.c); otherwise sample_main as it is. */
int client_sample_main(int argc, char **argv);

#endif
