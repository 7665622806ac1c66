/* request_names.c - the words of the request format: the methods, the edit ops and the
 * position words, shared by the parse, the writer and the application of a request. */
#include "request_internal.h"

static const char *const METHOD_NAMES[NNT_METHOD_COUNT] = {"trace", "lens", "patch", "generate", "attribute"};

const char *nnt_method_name(nnt_method m)
{
    return (int)m >= 0 && m < NNT_METHOD_COUNT ? METHOD_NAMES[m] : "?";
}

const char *const req_op_names[REQ_OP_COUNT] = {
    [REQ_OP_SAVE] = "save",
    [REQ_OP_ZERO] = "zero",
    [REQ_OP_SCALE] = "scale",
    [REQ_OP_SET] = "set",
    [REQ_OP_ADD] = "add",
    [REQ_OP_MASKED_FILL] = "masked_fill",
    [REQ_OP_ABLATE_EXPERT] = "ablate_expert",
    [REQ_OP_SKIP_LAYERS] = "skip_layers",
    [REQ_OP_STEER] = "steer",
    [REQ_OP_STEPS] = "steps",
    [REQ_OP_CALLBACK] = "callback",
};

const char *req_position_word(int p)
{
    return p == NNT_POS_PROMPT ? "prompt" : p == NNT_POS_GENERATED ? "generated" : p == NNT_POS_ALL ? "all" : NULL;
}
