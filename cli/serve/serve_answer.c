/* serve_answer.c - how `nnt serve` words a refusal: a small JSON body (cJSON) and the HTTP
 * status that goes with a libnnt status (out of memory is the request asking for more than the
 * server gives - its saves past [trace] save_mb, most often - so 413 too). */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

char *serve_error_json(const char *status, const char *message, size_t *len)
{
    cJSON *root = cJSON_CreateObject(), *e = root ? cJSON_AddObjectToObject(root, "error") : NULL;
    char *text = NULL;
    if (e && cJSON_AddStringToObject(e, "status", status) && cJSON_AddStringToObject(e, "message", message))
        text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (len) *len = text ? strlen(text) : 0;
    return text;
}

int serve_http_status(nnt_status st)
{
    switch (st) {
    case NNT_ERR_INVALID_ARGUMENT:
    case NNT_ERR_FORMAT:
    case NNT_ERR_SHAPE:
    case NNT_ERR_UNSUPPORTED:
    case NNT_ERR_PATH:
    case NNT_ERR_INDEX:
    case NNT_ERR_NOT_SERVED:
    case NNT_ERR_READ_ONLY:
    case NNT_ERR_NOT_FOUND:
        return 400;
    case NNT_ERR_OUT_OF_MEMORY:
        return 413;
    default:
        return 500;
    }
}
