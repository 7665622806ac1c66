/* messages.c - the nnt command's error messages: usage errors, bad arguments, and libnnt's
 * errors with the request's fields written as the options that gave them. */
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

int cli_fail(const cli_opts *o, nnt_runtime *rt, const char *what)
{
    const char *msg = nnt_last_error(rt);
    const char *doc = CLI_OPTIONS_NAME ": ";
    int usage = 0;
    char option[1200];
    if (o && !strncmp(msg, doc, strlen(doc))) msg += strlen(doc); /* a request the options made */
    size_t fl = o ? field_length(msg) : 0;
    if (fl) usage = !strncmp(msg, "lens", 4) || !strncmp(msg, "patch", 5);
    if (fl && cli_field_option(o, msg, fl, option, sizeof option)) {
        /* "rows[1].file: F: cannot open" reads "--prompt-file F (row 1): cannot open" */
        fprintf(stderr, "nnt: error: %s%s%s: %s\n", what ? what : "", what ? ": " : "", option, msg + fl + 2);
    } else {
        fprintf(stderr, "nnt: error: %s%s%s\n", what ? what : "", what ? ": " : "", msg);
    }
    return usage ? 2 : 1;
}
