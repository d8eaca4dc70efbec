/*
 * cli.h - shared pieces of the datahelix subcommands: option parsing of
 * numbers and limits, diagnostics to stderr, and small statistics. The CLI
 * is a client of the public API only (include/datahelix.h).
 */
#ifndef DH_CLI_H
#define DH_CLI_H

#include "datahelix.h"

#include <stdint.h>
#include <stdio.h>

#define CLI_USAGE 2 /* exit status for a usage error */
#define CLI_PEER_STOPPED 130 /* another node's agent was stopped (Ctrl-C's status there) */

int cli_index(int argc, char **argv);
int cli_inspect(int argc, char **argv);
int cli_sim(int argc, char **argv);
int cli_run(int argc, char **argv);
int cli_serve(int argc, char **argv);
int cli_gen(int argc, char **argv);
int cli_demo(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_report(int argc, char **argv);
/* cmd_report.c: the HTML report of n result files (and a trace, or NULL) into out; 0 or 1
 * with the error printed (bench and demo write theirs next to their JSON). */
int cli_report_write(const char *const *inputs, int n, const char *trace, const char *out);
/* The report of one result file (and a trace, or NULL) beside it: JSON's name with .html in
 * place of .json (or added), its path printed ("report: PATH"); 0 or 1. */
int cli_report_beside(const char *json, const char *trace);

/* bench_torch.c: the PyTorch DataLoader contender of bench --mode real. available: 1, or 0
 * with the reason (and the command that installs what is missing) in why. bench_torch: runs
 * c (policy "torch": map-style over the manifest; "wds": WebDataset-style over its shards)
 * and fills r; 0, or 1 with the error printed. */
int bench_torch_available(char *why, size_t len);
/* 0, or 1 with the error said: a manifest path that names a tar shard (index it first). */
int cli_not_a_shard(const char *manifest);
int bench_torch(const dh_run_config *c, dh_result *r);

/*
 * agent_mpi.c: the agent as one node of an mpirun job. cli_node_start: not started by a
 * multi-process launcher: 0 and *out NULL (one node, today's behaviour); else joins the
 * other nodes, sets cfg's nodes, node and step exchange, 0 and *out; 1 or CLI_USAGE with the
 * error printed. With *out NULL every other call is a no-op (rank 0).
 */
typedef struct cli_node cli_node;
int cli_node_start(dh_run_config *cfg, cli_node **out);
int cli_node_rank(const cli_node *n);
const char *cli_node_name(const cli_node *n); /* "node K (HOST, pid P)" */
/* Replaces *value by the mean of every node's (the same on all); 0, or 1 with the error. */
int cli_node_agree_mean(cli_node *n, double *value);
/* CPU seconds this node's communication thread used so far. */
double cli_node_comm_cpu(cli_node *n);
/* This node failed before its run's first exchange: the others are told why at once (they
 * would wait out $DH_NODE_TIMEOUT for a silent node); then cli_node_stop. */
void cli_node_fail(cli_node *n, const char *why);
void cli_node_stop(cli_node *n);

/*
 * If argv[*i] is a run option shared by sim, run and bench (--ranks,
 * --workers, --batch, --steps, --seed, --rho, --memory-budget, ...),
 * consumes it into cfg and returns 1; 0 if it is not one; -1 on a bad value.
 * Stress options go to *stress, which cfg->stress then points at (stress
 * must outlive the runs of cfg).
 */
int cli_run_option(int argc, char **argv, int *i, dh_run_config *cfg, dh_stress *stress);
extern const char cli_run_help[];
/* Human-readable block of one run's metrics. */
void cli_print_result(const dh_result *r);

/* Prints "datahelix: " + message to stderr. */
void cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The usage error of an argument `cmd` does not take: "CMD: unexpected argument "ARG" (did you
 * mean --OPTION? see datahelix CMD --help)", the suggestion the option of the help texts
 * (NULL-terminated) nearest to it, when one is within two edits (a user's trial typed --epoch
 * for --epochs). Returns CLI_USAGE. */
int cli_unexpected(const char *cmd, const char *arg, const char *const *help_texts);

/* Parses an integer / a number option value; prints a usage error and returns -1 when invalid. */
int cli_int(const char *opt, const char *val, int64_t min, int64_t max, int64_t *out);
int cli_num(const char *opt, const char *val, double min, double max, double *out);

/*
 * If argv[*i] is a limit option (--max-pixels N ...), consumes it and its
 * value into lim and returns 1; returns 0 if it is not one, -1 on a bad value.
 */
int cli_limit_option(int argc, char **argv, int *i, dh_limits *lim);
extern const char cli_limits_help[];

/*
 * Diagnostics on stderr ("datahelix: MESSAGE [CODE]"): the first CLI_DIAG_DEFAULT (or
 * $DH_MAX_ERRORS; 0: all) in full, the rest counted per code; cli_diag_flush prints the
 * counts (main registers it at exit). Any thread.
 */
#define CLI_DIAG_DEFAULT 20
void cli_diag(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cli_diag_flush(void);
/* A diag callback printing each message through cli_diag, counting them in *(int64_t *)user. */
void cli_print_diag(const dh_diag *d, void *user);

/*
 * Progress of a long command (index, gen, inspect --check-files, run, sim, bench) on stderr,
 * as a library progress callback (any thread) whose user is a cli_progress_what: on a
 * terminal one line ("gen: 120/400 samples (30%)"), redrawn at most 10 times a second and
 * erased at the end (diagnostics erase it before they print); elsewhere (a log, a pipe) a
 * plain line every $DH_PROGRESS_SECONDS (default CLI_PROGRESS_SECONDS) and none at the end.
 * total <= 0: no end known. cli_progress_quiet (--quiet) silences both.
 */
#define CLI_PROGRESS_SECONDS 30.0
typedef struct {
    const char *what, *unit; /* "gen", "samples" */
} cli_progress_what;
void cli_progress(int64_t done, int64_t total, void *user);
void cli_progress_quiet(void);
/* The period off a terminal; and a warning on stderr when $DH_PROGRESS_SECONDS is set but no
 * number of seconds >= 0.05 (main asks once). */
double cli_progress_seconds(void);
void cli_progress_check_env(void);
int cli_progress_is_quiet(void);

/*
 * Output files of the CLI (--json) appear complete or not at all: opened under a temporary
 * name beside the target before the work starts (an unwritable path fails at once) and
 * renamed over it by cli_out_commit; cli_out_abort removes it. path NULL: no file, every
 * call is a no-op. The library does the same for traces and manifests.
 */
typedef struct {
    FILE *f;
    const char *path;
    char tmp[4200];
} cli_out;
int cli_out_open(cli_out *o, const char *path); /* 0, or 1 with the error printed */
int cli_out_commit(cli_out *o);                 /* 0, or 1 with the error printed */
void cli_out_abort(cli_out *o);

/*
 * SIGINT/SIGTERM: cli_catch_interrupts installs a handler that only records the signal;
 * cli_should_stop (a dh_run_config.should_stop) then ends runs after the steps in flight,
 * and cli_interrupted() is the exit status to return (128 + signal), or 0.
 */
void cli_catch_interrupts(void);
int cli_should_stop(void *user);
int cli_interrupted(void);

/* Monotonic seconds. */
double cli_now(void);

/* Summary of a sample of values: sorts v in place. */
typedef struct {
    int64_t n;
    double min, p50, p95, max, mean;
} cli_dist;

void cli_distribution(double *v, int64_t n, cli_dist *out);

/* Peak resident set size of this process in bytes. */
int64_t cli_peak_rss(void);

#endif
