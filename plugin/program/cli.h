/* What the darknet-amp program adds to darknet's commands (docs/cfg.md,
 * "The darknet-amp program"): its own options, taken out of argv before
 * darknet reads it, the start-up line, and for `detector train` the training
 * record and the validation mAP.
 *
 *   -amp bfloat16|float16|float32|1|0   overrides [net] amp and amp_dtype
 *                                       (1: the device's default dtype)
 *   -map                                `detector train`: validation mAP@0.5
 *   -map_every N                        every N iterations (default: 4 epochs,
 *                                       at least 100) and at the end
 *
 * The record: <backup>/<cfg base>.record.tsv, one tab-separated row per
 * iteration after "#" comment lines:
 *   iteration loss avg_loss rate scale skipped images_per_s wall_s map50
 * scale and skipped are NaN with AMP off, map50 NaN where no mAP was taken;
 * wall_s counts from the first run's start and goes on across resumes, whose
 * first iteration drops the rows from that iteration on.
 *
 * Only the darknet program links this (plugin/program/, never the
 * libraries): it hands the library its part of darknet's hooks
 * (amp_cli_program, hooks.c's amp_program_set), and a library user's
 * networks see none of it. Nothing here exits: a record or
 * an evaluation that fails says so once and training goes on. */
#ifndef AMP_CLI_H
#define AMP_CLI_H

#include "darknet.h"
#include "core.h"    /* amp_program */
#include "options.h" /* amp_net_override */

#include <stddef.h>

/* cli_options.c: the program's options as the command line gave them. */
typedef struct amp_cli_options {
    int program;            /* the command hook ran: this is the darknet-amp program */
    double start;           /* when it started (amp_clock) */
    amp_net_override amp;   /* -amp */
    char amp_written[64];   /* ... as written, for the start-up line */
    int map, map_every;     /* -map, -map_every N (0: the default) */
    int ignored_said[3];    /* -dont_show, -show_imgs, -mjpeg_port said */
} amp_cli_options;
const amp_cli_options *amp_cli_options_get(void);
/* The command hook ran: this process is the program, started now. */
void amp_cli_started(void);
/* Takes -amp, -map, -map_every and the forks' display options out of argv
 * (from argv[2] on, lowering *argc): 0, or 1 with *status 2 and a message on
 * stderr when one of them is malformed. */
int amp_cli_take_options(int *argc, char **argv, int *status);

/* cli.c: the command hook: runs `amp show FILE` (returns 1, *status its exit
 * status), or takes -amp, -map and -map_every out of argv (lowering *argc)
 * and returns 0 so that darknet runs its command; 1 with *status 2 and a
 * message on stderr when one of them is malformed. */
int amp_cli_command(int *argc, char **argv, int *status);

/* darknet-amp with no command, -h, --help or help: the commands and options
 * (stdout for a request, stderr and *status 2 otherwise); an unknown command,
 * a family's unknown subcommand or one without its arguments: refused with
 * the list of what exists and *status 2. Returns 1 when it answered, 0 when
 * darknet (or the program) runs the command (cli_help.c). */
int amp_cli_check_command(int argc, char **argv, int *status);

/* "PROG: COMMAND: " fmt (with arg) on stderr, then "usage: PROG USAGE" where
 * usage is not NULL; *status = code; returns 1 (the commands' refusals). */
int amp_cli_refuse(int *status, int code, const char *prog, const char *command,
                   const char *usage, const char *fmt, const char *arg);

/* `detector map DATA CFG WEIGHTS [options]` (cli_map.c), argv with the
 * program's options taken out: returns 1 with *status its exit status. */
int amp_cli_detector_map(int argc, char **argv, int *status);

/* A CUDA build's darknet selects a device before any command (-i N, default
 * 0) unless -nogpu, and a CUDA error there is an assertion. Where CUDA finds
 * no usable device (a login node, a laptop) or not the one asked for, says
 * what CUDA reported and what to do instead, and returns 1 with *status 1;
 * 0 in a CPU build, with -nogpu, or when the device is there. */
int amp_cli_no_device(int argc, char **argv, int *status);

/* `detector calc_anchors DATA -num_of_clusters N -width W -height H`
 * (cli_anchors.c): returns 1 with *status its exit status. */
int amp_cli_calc_anchors(int argc, char **argv, int *status);

/* The program's -amp (set 0 without one, and outside the program). */
const amp_net_override *amp_cli_override(void);

/* Once [net] is read: says, once per process and only in the program, what
 * the program is and whether AMP is on for cfgfile, and which cfg values -amp
 * overrides (conflict, as amp_options_parse_net_override wrote it). */
void amp_cli_net_read(const network *net, const char *cfgfile, int enabled, amp_dtype dtype,
                      int data_parallel, const char *conflict);

/* The hooks' train_progress: one record row, and the mAP when it is due. */
void amp_cli_progress(network *net, const darknet_train_progress *p);

/* cli_kinds.c: `amp kinds`, the table of layer kinds and this build's
 * backends' half forms: returns 1 with *status 0. */
int amp_cli_kinds(int argc, char **argv, int *status);

/* state_show.c: `darknet amp show`: the state file at path (or beside the weights file at
 * path) in words on out, and whether the weights file beside it is the one it
 * was saved with. A missing, unreadable or corrupt state file is an error
 * naming it, with nothing printed. */
amp_status amp_state_file_show(const char *path, FILE *out, char *err, size_t errlen);

/* The program's part of darknet's hooks (hooks.c's amp_program), which
 * cli_register.c hands the library before darknet runs. */
extern const amp_program amp_cli_program;

#endif
