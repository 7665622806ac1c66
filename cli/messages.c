/* messages.c - the nnt command's error messages: usage errors, bad arguments, and libnnt's
 * errors with the request's fields written as the options that gave them (a request the options
 * made) or as the document's fields (--request). */
#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "fields.h"

int cli_usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "nnt: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n\n%s", CLI_USAGE);
    return 2;
}

int cli_arg_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "nnt: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return 2;
}

/* The length of the request field path msg starts with ("edits[2].positions[0]"), or 0. */
static size_t field_length(const char *msg)
{
    size_t i = 0;
    while (islower((unsigned char)msg[i]) || msg[i] == '_') i++;
    if (!i) return 0;
    for (;;) {
        if (msg[i] == '[') {
            size_t j = i + 1;
            while (isdigit((unsigned char)msg[j])) j++;
            if (j == i + 1 || msg[j] != ']') return 0;
            i = j + 1;
        } else if (msg[i] == '.' && (islower((unsigned char)msg[i + 1]) || msg[i + 1] == '_')) {
            i++;
            while (islower((unsigned char)msg[i]) || msg[i] == '_') i++;
        } else {
            break;
        }
    }
    return msg[i] == ':' && msg[i + 1] == ' ' ? i : 0;
}

/* How the option behind field joins the rest of the message: its own words first
 * ("--prompt-file F: cannot open", "--set: F: not a regular file", "--prompt row 0 encodes to no
 * token", "--stop-id 300 is outside ..."), else "OPTION: rest". */
static void print_translated(const cli_opts *o, const char *field, size_t fl, const char *option, const char *rest)
{
    int r = !strncmp(field, "rows[", 5), e = !strncmp(field, "edits[", 6);
    const char *dot = memchr(field, '.', fl);
    if (r && dot && !strncmp(dot, ".file", 5)) {
        fprintf(stderr, "--prompt-file %s\n", rest); /* rest starts with the file's name */
    } else if (e && dot && !strncmp(dot, ".tensor", 7)) {
        char flag[32];
        snprintf(flag, sizeof flag, "%.*s", (int)strcspn(option, " "), option);
        fprintf(stderr, "%s: %s\n", flag, rest);
    } else if ((r && !strncmp(rest, "encodes to no token", 19)) || !strncmp(field, "generate.stop_ids", 17)) {
        fprintf(stderr, "%s %s\n", option, rest);
    } else {
        fprintf(stderr, "%s: %s\n", option, rest);
    }
    (void)o;
}

/* A --request run: the message as libnnt words it, a field's path after the document's name
 * ("r.json: generate.stop_ids[0]: ..."); the options' words are not the document's. Returns 1. */
static int fail_request(const char *file, const char *msg, const char *what)
{
    size_t n = strlen(file);
    int named = !strncmp(msg, file, n) && !strncmp(msg + n, ": ", 2);
    fprintf(stderr, "nnt: error: %s%s", what ? what : "", what ? ": " : "");
    static const char *const TOP[] = {"rows", "edits", "saves", "generate", "lens", "patch", "attribute", "grad",
                                      "add_special"};
    size_t fl = named ? 0 : field_length(msg), top = strcspn(msg, ".[:");
    for (size_t k = 0; fl && k < sizeof TOP / sizeof *TOP; k++)
        if (strlen(TOP[k]) == top && !strncmp(msg, TOP[k], top)) {
            fprintf(stderr, "%s: ", file); /* a field of the document, from the run */
            break;
        }
    fprintf(stderr, "%s\n", msg);
    return 1;
}

int cli_fail(const cli_opts *o, nnt_runtime *rt, const char *what)
{
    const char *msg = nnt_last_error(rt);
    if (o && o->request_file) return fail_request(o->request_file, msg, what);
    const char *doc = CLI_OPTIONS_NAME ": ";
    char option[1200];
    if (o && !strncmp(msg, doc, strlen(doc))) msg += strlen(doc); /* a request the options made */
    size_t fl = o ? field_length(msg) : 0;
    int usage = fl && (!strncmp(msg, "lens", 4) || !strncmp(msg, "patch", 5) || !strncmp(msg, "attribute", 9));
    fprintf(stderr, "nnt: error: %s%s", what ? what : "", what ? ": " : "");
    if (fl && cli_field_option(o, msg, fl, option, sizeof option))
        print_translated(o, msg, fl, option, msg + fl + 2);
    else
        fprintf(stderr, "%s\n", msg);
    return usage ? 2 : 1;
}
