/* status.c - status-code names and the error record helpers. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

static const char *const status_names[NNT_STATUS_COUNT] = {
    [NNT_OK] = "ok",
    [NNT_ERR_INVALID_ARGUMENT] = "invalid argument",
    [NNT_ERR_OUT_OF_MEMORY] = "out of memory",
    [NNT_ERR_IO] = "i/o error",
    [NNT_ERR_FORMAT] = "malformed file",
    [NNT_ERR_CONFIG] = "configuration error",
    [NNT_ERR_PLUGIN] = "not a valid plugin",
    [NNT_ERR_ABI] = "plugin ABI mismatch",
    [NNT_ERR_CONFLICT] = "conflicting plugins",
    [NNT_ERR_NOT_FOUND] = "not found",
    [NNT_ERR_SHAPE] = "shape or dtype mismatch",
    [NNT_ERR_UNSUPPORTED] = "unsupported",
    [NNT_ERR_PATH] = "unknown value path",
    [NNT_ERR_INDEX] = "index out of range",
    [NNT_ERR_NOT_SERVED] = "value not served",
    [NNT_ERR_READ_ONLY] = "value is read-only",
    [NNT_ERR_BACKEND] = "kernel backend error",
    [NNT_ERR_CALLBACK] = "edit callback failed",
    [NNT_ERR_STATE] = "invalid state",
    [NNT_ERR_INTERNAL] = "internal error",
    [NNT_ERR_BUSY] = "busy: a call of the same runtime is running (one call at a time per runtime: another "
                     "thread's, or the call whose edit callback this is)",
    [NNT_ERR_INTERRUPTED] = "interrupted: the runtime's progress handler asked the call to stop",
};

const char *nnt_status_str(nnt_status status)
{
    if ((int)status < 0 || status >= NNT_STATUS_COUNT) return "unknown status";
    return status_names[status];
}

nnt_status nnt_err_setv(nnt_error *err, nnt_status status, const char *fmt, va_list ap)
{
    if (err) {
        err->status = status;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    }
    return status;
}

nnt_status nnt_err_set(nnt_error *err, nnt_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    nnt_err_setv(err, status, fmt, ap);
    va_end(ap);
    return status;
}

void nnt_err_prefix(nnt_error *err, const char *fmt, ...)
{
    if (!err) return;
    char prefix[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    char old[NNT_ERROR_MSG_MAX];
    memcpy(old, err->msg, sizeof old);
    size_t n = strlen(prefix);
    if (n > sizeof err->msg - 3) n = sizeof err->msg - 3;
    memcpy(err->msg, prefix, n);
    err->msg[n] = ':';
    err->msg[n + 1] = ' ';
    size_t room = sizeof err->msg - n - 2;
    size_t m = strlen(old);
    if (m >= room) m = room - 1;
    memcpy(err->msg + n + 2, old, m);
    err->msg[n + 2 + m] = '\0';
}

void nnt_err_clear(nnt_error *err)
{
    if (!err) return;
    err->status = NNT_OK;
    err->msg[0] = '\0';
}
