/* fields.h - the options behind a request's fields (fields.c), for request_build.c and
 * messages.c. */
#ifndef NNT_CLI_FIELDS_H
#define NNT_CLI_FIELDS_H

#include <stddef.h>

#include "cli.h"

/* The request options o->reqs[k..] are all saves and go to the request's "saves"; those before
 * k go to "edits" in order (a save among them as {"op": "save"}). With a --steps among them,
 * every request goes to "edits" (a save after --steps applies at its steps only). Returns k. */
int cli_first_trailing_save(const cli_opts *o);
/* The option that gave request field `field` (its first len bytes: "edits[2]", "rows[1]",
 * "patch.metric", "lens.positions[0]", ...) as messages name it, into buf (n bytes). Returns 1,
 * or 0 for a field no option gave. */
int cli_field_option(const cli_opts *o, const char *field, size_t len, char *buf, size_t n);

#endif /* NNT_CLI_FIELDS_H */
