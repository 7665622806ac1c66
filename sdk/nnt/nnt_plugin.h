/* nnt_plugin.h - the header every nnt plugin descriptor starts with.
 *
 * A plugin is a shared object that exports exactly one data symbol: `nnt_family_plugin` (a
 * const nnt_family_descriptor) or `nnt_backend_plugin` (a const nnt_backend_descriptor). The
 * host reads the descriptor's header and checks it - magic, kind, ABI major equal, ABI minor not
 * newer, struct size, name - before it calls any function the plugin provides. */
#ifndef NNT_PLUGIN_H
#define NNT_PLUGIN_H

#include "nnt_types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NNT_PLUGIN_MAGIC 0x504e4e54u /* "TNNP" in memory order; any other value: not a plugin */

typedef enum nnt_plugin_kind {
    NNT_PLUGIN_FAMILY = 1,
    NNT_PLUGIN_BACKEND = 2
} nnt_plugin_kind;

/* Exported symbol names. */
#define NNT_FAMILY_SYMBOL "nnt_family_plugin"
#define NNT_BACKEND_SYMBOL "nnt_backend_plugin"

typedef struct nnt_plugin_header {
    uint32_t magic;       /* NNT_PLUGIN_MAGIC */
    uint16_t abi_major;   /* NNT_ABI_MAJOR the plugin was built with */
    uint16_t abi_minor;   /* NNT_ABI_MINOR the plugin was built with */
    uint32_t struct_size; /* sizeof the whole descriptor as the plugin saw it */
    uint32_t kind;        /* nnt_plugin_kind */
    const char *name;     /* [a-z0-9_]+, unique among loaded plugins of its kind */
    const char *version;  /* free text, e.g. "0.1.0" */
    const char *summary;  /* one line for `nnt plugins` */
} nnt_plugin_header;

/* Fills a header for the descriptor type D; use as the first initialiser of a descriptor. */
#define NNT_PLUGIN_HEADER(D, KIND, NAME, VERSION, SUMMARY)                                  \
    {                                                                                       \
        /* .magic = */ NNT_PLUGIN_MAGIC, /* .abi_major = */ NNT_ABI_MAJOR,                  \
        /* .abi_minor = */ NNT_ABI_MINOR, /* .struct_size = */ (uint32_t)sizeof(D),         \
        /* .kind = */ (KIND), /* .name = */ (NAME), /* .version = */ (VERSION),             \
        /* .summary = */ (SUMMARY)                                                          \
    }

#if defined(__GNUC__)
#define NNT_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define NNT_PLUGIN_EXPORT
#endif

#ifdef __cplusplus
}
#endif
#endif /* NNT_PLUGIN_H */
