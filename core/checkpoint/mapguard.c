/* mapguard.c - memory-mapped checkpoint files that change under a run. A file truncated while
 * mapped makes reads of its lost pages raise SIGBUS (POSIX mmap: "references within the address
 * range that do not correspond to the file ... result in delivery of a SIGBUS"). With the
 * opt-in handler of nnt_protect_mapped_files, a SIGBUS inside a registered mapping replaces the
 * rest of that mapping with zero pages, so the faulting read and every later one complete, and
 * records the fault; the core then fails the load or forward with an error naming the file.
 *
 * Global state, and why: a signal handler sees only globals. The registry below (a fixed table
 * of mapped ranges with their file names, written with atomic stores, read by the handler) and
 * the previous SIGBUS action are the library's only mutable globals. Files are registered when
 * mapped and removed when unmapped whether or not the handler is installed; the handler is
 * installed only when the program asks (the library never installs it on its own). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

/* Mapped files tracked at once; a file mapped when the table is full is not protected (its
 * size and modification time are still checked). */
#define GUARD_SLOTS 4096

struct guard_slot {
    uintptr_t start, end; /* the mapping's bytes; start 0: slot free */
    const char *path;     /* the file's path, owned by its nnt_st_file */
    int faulted;          /* a SIGBUS hit this mapping */
    uintptr_t fault_at;   /* byte offset of the first faulting read in the file */
};

static struct guard_slot slots[GUARD_SLOTS];
static struct sigaction previous;
static int installed;
static uintptr_t page_size = 4096;

int nnt_guard_register(const void *start, size_t len, const char *path)
{
    for (int i = 0; i < GUARD_SLOTS; i++) {
        uintptr_t zero = 0;
        /* claim a free slot with a placeholder start; publish end and path, then the start */
        if (__atomic_compare_exchange_n(&slots[i].start, &zero, (uintptr_t)1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
            __atomic_store_n(&slots[i].end, (uintptr_t)start + len, __ATOMIC_RELAXED);
            __atomic_store_n(&slots[i].path, path, __ATOMIC_RELAXED);
            __atomic_store_n(&slots[i].faulted, 0, __ATOMIC_RELAXED);
            __atomic_store_n(&slots[i].fault_at, (uintptr_t)0, __ATOMIC_RELAXED);
            __atomic_store_n(&slots[i].start, (uintptr_t)start, __ATOMIC_RELEASE);
            return i;
        }
    }
    return -1;
}

void nnt_guard_unregister(int slot)
{
    if (slot < 0 || slot >= GUARD_SLOTS) return;
    __atomic_store_n(&slots[slot].end, (uintptr_t)0, __ATOMIC_RELAXED);
    __atomic_store_n(&slots[slot].start, (uintptr_t)0, __ATOMIC_RELEASE);
}

int nnt_guard_faulted(int slot, uint64_t *offset)
{
    if (slot < 0 || slot >= GUARD_SLOTS || !__atomic_load_n(&slots[slot].faulted, __ATOMIC_ACQUIRE)) return 0;
    if (offset) *offset = __atomic_load_n(&slots[slot].fault_at, __ATOMIC_RELAXED);
    return 1;
}

/* Only async-signal-safe work here: atomic loads and stores, the mmap system call (made
 * directly, so no library wrapper or interceptor runs), and sigaction. */
static void on_sigbus(int sig, siginfo_t *si, void *ctx)
{
    uintptr_t a = (uintptr_t)si->si_addr;
    for (int i = 0; i < GUARD_SLOTS; i++) {
        uintptr_t s = __atomic_load_n(&slots[i].start, __ATOMIC_ACQUIRE);
        uintptr_t e = __atomic_load_n(&slots[i].end, __ATOMIC_RELAXED);
        if (s <= 1 || a < s || a >= e) continue;
        uintptr_t page = a & ~(page_size - 1);
        long r = syscall(SYS_mmap, (void *)page, (size_t)(e - page), PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                         -1, (off_t)0);
        if (r != (long)page) break; /* cannot recover: handled as not ours */
        int was = 0;
        if (__atomic_compare_exchange_n(&slots[i].faulted, &was, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            __atomic_store_n(&slots[i].fault_at, a - s, __ATOMIC_RELEASE);
        return; /* the read is retried and now finds zeros */
    }
    /* not a mapped checkpoint: whatever handled SIGBUS before us, else the default (the
     * faulting read repeats and the signal ends the process as it would have) */
    if ((previous.sa_flags & SA_SIGINFO) && previous.sa_sigaction) {
        previous.sa_sigaction(sig, si, ctx);
        return;
    }
    if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN && previous.sa_handler) {
        previous.sa_handler(sig);
        return;
    }
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGBUS, &dfl, NULL);
}

nnt_status nnt_protect_mapped_files(void)
{
    if (__atomic_load_n(&installed, __ATOMIC_ACQUIRE)) return NNT_OK;
    long ps = sysconf(_SC_PAGESIZE);
    if (ps > 0) page_size = (uintptr_t)ps;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, &previous) != 0) return NNT_ERR_IO;
    __atomic_store_n(&installed, 1, __ATOMIC_RELEASE);
    return NNT_OK;
}
