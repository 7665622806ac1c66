/* nnt_plugin.h - the header every nnt plugin descriptor starts with.
 *
 * A plugin is a shared object that exports exactly one data symbol: `nnt_family_plugin` (a
 * const nnt_family_descriptor) or `nnt_backend_plugin` (a const nnt_backend_descriptor). The
 * core reads the descriptor's header and checks it - magic, kind, ABI major equal, ABI minor not
 * newer, struct size, name - before it calls any function the plugin provides.
 *
 * Every table and argument struct that crosses the plugin boundary starts with its size
 * (struct_size: the descriptor's in its header, the others as their first member). A struct
 * only grows at its end within an ABI major, so a reader reads up to the smaller of its own
 * sizeof and struct_size and takes later fields as absent (NULL or 0): a plugin built for an
 * older minor keeps working with a newer core. */
#ifndef NNT_PLUGIN_H
#define NNT_PLUGIN_H

#include "nnt_types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NNT_PLUGIN_MAGIC 0x504e4e54u /* "TNNP" in memory order; any other value: not a plugin */

typedef enum nnt_plugin_kind {
    NNT_PLUGIN_FAMILY = 1,
    NNT_PLUGIN_BACKEND = 2,
    NNT_PLUGIN_TRANSPORT = 3 /* nnt_transport.h: loaded only for a run over several ranks */
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

/* Fills a header for the descriptor type D; use as the initialiser of a descriptor's .header. */
#define NNT_PLUGIN_HEADER(D, KIND, NAME, VERSION, SUMMARY)                                            \
    {                                                                                                 \
        .magic = NNT_PLUGIN_MAGIC, .abi_major = NNT_ABI_MAJOR, .abi_minor = NNT_ABI_MINOR,           \
        .struct_size = (uint32_t)sizeof(D), .kind = (KIND), .name = (NAME), .version = (VERSION),     \
        .summary = (SUMMARY)                                                                          \
    }

/* 1 when the sized struct *P (its first member `uint32_t struct_size`) of type T was filled by
 * code that knew FIELD: fields past struct_size were not written and read as absent. */
#define NNT_STRUCT_HAS(P, T, FIELD) ((size_t)(P)->struct_size >= offsetof(T, FIELD) + sizeof(((T *)0)->FIELD))

#if defined(__GNUC__)
#define NNT_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define NNT_PLUGIN_EXPORT
#endif

#ifdef __cplusplus
}
#endif
#endif /* NNT_PLUGIN_H */
