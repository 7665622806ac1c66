/* nnt_transport.h - the ABI of a transport plugin: how the processes (ranks) of one distributed
 * run reach each other. nnt's own transport is Open MPI (libnnt_mpi.so, built when Open MPI's
 * development files are found); a build without it runs every single-process command as before,
 * and nothing loads a transport unless a launcher (mpirun) started more than one rank.
 *
 * A transport plugin exports one data symbol, `nnt_transport_plugin`, a const
 * nnt_transport_descriptor whose header has kind NNT_PLUGIN_TRANSPORT (nnt_plugin.h); the core
 * checks the header as it does a family's before it calls anything. Transport plugins live
 * apart from the family and backend directories (the INI's [distributed] transport = FILE, or
 * the default next to the kernel backends), so the plugin host's directory scan never loads one.
 *
 * Every call that waits is bounded: it gives up after the timeout given to `open` with
 * NNT_ERR_STATE and a message naming the peer rank and what was awaited, so a rank that stopped
 * answering ends the run instead of hanging it. A rank that fails tells the others with
 * `notify_failure`; any later wait of theirs then returns NNT_ERR_STATE with a message naming the
 * failed rank and its reason. Messages between two ranks arrive in the order they were sent. */
#ifndef NNT_TRANSPORT_H
#define NNT_TRANSPORT_H

#include <stddef.h>

#include "nnt_plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NNT_TRANSPORT_SYMBOL "nnt_transport_plugin"

typedef struct nnt_transport nnt_transport; /* one open transport, the plugin's */

typedef struct nnt_transport_descriptor {
    nnt_plugin_header header; /* kind NNT_PLUGIN_TRANSPORT */
    /* 1 when the environment shows that a launcher started this process as one rank of several
     * (Open MPI: OMPI_COMM_WORLD_SIZE > 1), 0 otherwise; reads the environment only, initialises
     * nothing, so it may be called in any process. */
    int (*launched)(void);
    /* Joins the run (MPI_Init). timeout_s (> 0): the bound of the start-up and of every later
     * wait, in seconds. *out: freed with close. Errors: NNT_ERR_BACKEND (the library failed to
     * start, with its message), NNT_ERR_STATE (the ranks did not all start within timeout_s: one
     * stopped while starting; the process should then end, as the library may still be inside its
     * start-up), NNT_ERR_OUT_OF_MEMORY. */
    nnt_status (*open)(double timeout_s, nnt_transport **out, nnt_error *err);
    int (*rank)(const nnt_transport *t); /* 0 .. size - 1 */
    int (*size)(const nnt_transport *t); /* ranks in the run, >= 1 */
    /* Sends bytes bytes of buf (the caller's, unchanged) to rank peer; returns when buf may be
     * reused. Errors: NNT_ERR_INVALID_ARGUMENT (peer out of range or this rank), NNT_ERR_STATE
     * (timeout or a failed rank), NNT_ERR_BACKEND. */
    nnt_status (*send)(nnt_transport *t, int peer, const void *buf, size_t bytes, nnt_error *err);
    /* Receives the next message from rank peer into buf (the caller's, bytes bytes); the message
     * must hold exactly bytes bytes (NNT_ERR_FORMAT naming both sizes otherwise). Errors: as send,
     * and NNT_ERR_FORMAT. */
    nnt_status (*recv)(nnt_transport *t, int peer, void *buf, size_t bytes, nnt_error *err);
    /* Tells every other rank that this one failed, with msg (one line, copied; at most 1000
     * bytes are sent). Never waits for an answer. */
    void (*notify_failure)(nnt_transport *t, const char *msg);
    /* The rank whose failure notice ended a wait of this one, or -1: tells a wait that failed
     * because another rank did (which that rank reports) from one that failed here. */
    int (*failed_rank)(const nnt_transport *t);
    /* Ends every rank of the run at once (MPI_Abort) with exit status code; for a wait that
     * timed out, where the other ranks may not be listening. Does not return. */
    void (*abort)(nnt_transport *t, int code);
    /* Leaves the run (MPI_Finalize) and frees t; NULL is allowed. Bounded by the timeout too: when
     * the other ranks do not all arrive in time it returns without leaving, and the launcher
     * reports the rank that ended unfinalised. */
    void (*close)(nnt_transport *t);
} nnt_transport_descriptor;

#ifdef __cplusplus
}
#endif
#endif /* NNT_TRANSPORT_H */
