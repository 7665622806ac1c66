/* cli_write_shim.c - an LD_PRELOAD library for tests/cli_test.sh that makes the write of --out
 * fail or be interrupted at a chosen moment: its fsync (called by the safetensors writer once
 * every byte is in the temporary file, before the rename) acts as NNT_TEST_FSYNC says:
 *   fail  returns -1 with errno EIO (a full or failing disk);
 *   term  raises SIGTERM first, as a `kill` arriving mid-write would;
 *   int   raises SIGINT first (Ctrl-C);
 * and otherwise syncs as fsync(2) does. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int fsync(int fd)
{
    const char *mode = getenv("NNT_TEST_FSYNC");
    if (mode && strcmp(mode, "fail") == 0) {
        errno = EIO;
        return -1;
    }
    if (mode && strcmp(mode, "term") == 0) raise(SIGTERM);
    if (mode && strcmp(mode, "int") == 0) raise(SIGINT);
    return (int)syscall(SYS_fsync, fd);
}
