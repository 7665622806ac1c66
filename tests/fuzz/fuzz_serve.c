/* fuzz_serve.c - libFuzzer harness for `nnt serve` (cli/serve/, docs/server.md): a server of the
 * tiny example MiniMax-M2 model runs in this process on a loopback port, and each input is
 * written to it as the raw bytes of one connection (request line, headers and body alike; the
 * writing side is then shut, so an incomplete request ends at once). Whatever the bytes, an
 * answer must be an HTTP status line, and afterwards the server must still answer a health check
 * and run a valid request. The server has no tokens (loopback), small limits, and runs requests
 * of at most 256 tokens and 2 new tokens. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "cli/serve/serve.h"
#include "fuzz_common.h"

static serve_state S;
static serve_http *H;
static int port;

static void stop(void)
{
    serve_http_stop(H);
    serve_workers_stop(&S);
    nnt_model_free(S.models[0].m);
    nnt_runtime_close(S.models[0].rt);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    S.lim = (serve_limits){.body_bytes = 1 << 20, .result_bytes = 64 << 20, .queue = 4, .per_user = 4,
                           .timeout_s = 10, .tokens = 256, .new_tokens = 2, .connections = 256, .idle_s = 2,
                           .drain_s = 5, .share = 4};
    pthread_mutex_init(&S.mu, NULL);
    pthread_cond_init(&S.cv, NULL);
    S.started = serve_now();
    serve_model *md = &S.models[0];
    snprintf(md->name, sizeof md->name, "example");
    md->srv = &S;
    md->rt = fuzz_runtime_open();
    if (nnt_model_load(md->rt, NNT_FUZZ_SOURCE_DIR "/examples/tiny-minimax-m2", &md->m) != NNT_OK) {
        fprintf(stderr, "nnt fuzz: model: %s\n", nnt_last_error(md->rt));
        abort();
    }
    S.n_models = 1;
    char msg[256];
    if (serve_workers_start(&S) != 0 || !(H = serve_http_start(&S, "127.0.0.1:0", &port, msg, sizeof msg))) {
        fprintf(stderr, "nnt fuzz: serve: %s\n", msg);
        abort();
    }
    atexit(stop);
    return 0;
}

/* Sends bytes on a new connection, shuts the writing side when half_close (the server then
 * takes the client for gone once the request is in, as it takes any end of stream) and reads the
 * answer (the last n - 1 bytes, NUL-terminated) until the server closes or 15 s pass. Returns
 * the bytes kept. */
static size_t exchange(const uint8_t *bytes, size_t len, int half_close, char *answer, size_t n)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    /* a few hundred connections a second: the client's end closes with a reset (no TIME_WAIT,
     * which would use up the local ports in a minute), and a connect refused for want of a
     * port or a listen slot is tried again for up to 2 s before it counts as a failure */
    int fd = -1, err = 0;
    for (int tries = 0; tries < 200; tries++) {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        FUZZ_CHECK(fd >= 0, "socket");
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) break;
        err = errno;
        close(fd);
        fd = -1;
        usleep(10000);
    }
    FUZZ_CHECK(fd >= 0, "connect to the server: %s", strerror(err));
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    struct timeval tv = {.tv_sec = 15};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    size_t sent = 0;
    while (sent < len) {
        ssize_t k = send(fd, bytes + sent, len - sent, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue; /* libFuzzer's timer signal */
        if (k <= 0) break;                      /* the server may close early (a refused body) */
        sent += (size_t)k;
    }
    if (half_close) shutdown(fd, SHUT_WR);
    size_t got = 0;
    for (;;) {
        ssize_t k = recv(fd, answer + got, n - 1 - got, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
        if (got == n - 1) got = 0; /* keep reading to the end; only the last buffer is kept */
    }
    answer[got] = '\0';
    close(fd);
    return got;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char answer[1 << 16];
    size_t got = exchange(data, size, 1, answer, sizeof answer);
    if (got >= 12 && !strncmp(answer, "HTTP/1.", 7))
        FUZZ_CHECK(answer[9] >= '1' && answer[9] <= '5', "an answer without a status code: %.40s", answer);
    static const char health[] = "GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    exchange((const uint8_t *)health, sizeof health - 1, 0, answer, sizeof answer);
    FUZZ_CHECK(!strncmp(answer, "HTTP/1.1 200", 12), "the server stopped answering health checks: %.60s", answer);
    static const char run[] = "POST /v1/models/example/request HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                              "Content-Type: application/json\r\nContent-Length: 63\r\n\r\n"
                              "{\"nnt_request\": 1, \"rows\": [{\"tokens\": [1, 2]}], \"saves\": []}  ";
    exchange((const uint8_t *)run, sizeof run - 1, 0, answer, sizeof answer);
    FUZZ_CHECK(!strncmp(answer, "HTTP/1.1 200", 12), "the server stopped running requests: %.60s", answer);
    return 0;
}
