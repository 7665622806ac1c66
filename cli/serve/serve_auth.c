/* serve_auth.c - `nnt serve --tokens FILE`: the users and their bearer tokens. Only each
 * token's SHA-256 (GnuTLS) is kept in memory; a presented token is hashed and compared with
 * every entry in time that does not depend on where the bytes differ. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>

#include "nnt/nnt.h"
#include "serve.h"

#define TOKEN_MIN 16
#define TOKEN_MAX 512
#define MAX_USERS 4096

static int hash_token(const char *token, uint8_t out[SERVE_HASH_BYTES])
{
    return gnutls_hash_fast(GNUTLS_DIG_SHA256, token, strlen(token), out) == 0 ? 0 : -1;
}

/* One line "NAME TOKEN" into u. Returns 0, or -1 with msg. */
static int parse_line(char *line, serve_user *u, char *why, size_t n)
{
    char *name = strtok(line, " \t"), *token = strtok(NULL, " \t"), *more = strtok(NULL, " \t");
    if (!name || !token || more) {
        snprintf(why, n, "expected NAME TOKEN (two fields separated by blanks)");
        return -1;
    }
    if (strlen(name) >= SERVE_NAME_MAX) {
        snprintf(why, n, "name of %zu characters; at most %d", strlen(name), SERVE_NAME_MAX - 1);
        return -1;
    }
    size_t len = strlen(token);
    if (len < TOKEN_MIN || len > TOKEN_MAX) {
        snprintf(why, n, "token of %zu characters; a token has %d to %d", len, TOKEN_MIN, TOKEN_MAX);
        return -1;
    }
    for (size_t i = 0; i < len; i++)
        if (!isgraph((unsigned char)token[i])) {
            snprintf(why, n, "token holds a character that is not printable ASCII");
            return -1;
        }
    snprintf(u->name, sizeof u->name, "%s", name);
    if (hash_token(token, u->hash) != 0) {
        snprintf(why, n, "GnuTLS could not hash the token");
        return -1;
    }
    memset(token, 0, len); /* the line buffer is the only other copy */
    return 0;
}

int serve_auth_load(serve_auth *a, char *msg, size_t n)
{
    char *text = NULL;
    size_t len = 0;
    nnt_error err = {0};
    if (nnt_read_file(a->file, (size_t)1 << 20, &text, &len, &err) != NNT_OK) {
        snprintf(msg, n, "--tokens: %s", err.msg);
        return -1;
    }
    serve_user *users = NULL;
    int count = 0, cap = 0, rc = 0, line_no = 0;
    for (char *line = text, *next; line && rc == 0; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        line_no++;
        size_t l = strlen(line);
        while (l && (line[l - 1] == '\r' || isspace((unsigned char)line[l - 1]))) line[--l] = '\0';
        while (*line == ' ' || *line == '\t') line++;
        if (!*line || *line == '#') continue;
        if (count == MAX_USERS) {
            snprintf(msg, n, "%s:%d: more than %d users", a->file, line_no, MAX_USERS);
            rc = -1;
            break;
        }
        if (count == cap) {
            cap = cap ? cap * 2 : 16;
            serve_user *grown = realloc(users, sizeof *users * (size_t)cap);
            if (!grown) {
                snprintf(msg, n, "%s: no memory", a->file);
                rc = -1;
                break;
            }
            users = grown;
        }
        serve_user u = {0};
        char why[160];
        if (parse_line(line, &u, why, sizeof why) != 0) {
            snprintf(msg, n, "%s:%d: %s", a->file, line_no, why);
            rc = -1;
            break;
        }
        for (int i = 0; i < count && rc == 0; i++)
            if (!strcmp(users[i].name, u.name)) {
                snprintf(msg, n, "%s:%d: user '%s' is named twice", a->file, line_no, u.name);
                rc = -1;
            }
        for (int i = 0; i < a->n_users && rc == 0; i++)
            if (!strcmp(a->users[i].name, u.name)) u.active = a->users[i].active;
        if (rc == 0) users[count++] = u;
    }
    if (text) memset(text, 0, len);
    free(text);
    if (rc == 0 && count == 0) {
        snprintf(msg, n, "%s: no users (each line is NAME TOKEN)", a->file);
        rc = -1;
    }
    if (rc != 0) {
        free(users);
        return -1;
    }
    free(a->users);
    a->users = users;
    a->n_users = count;
    return 0;
}

serve_user *serve_auth_find(serve_auth *a, const char *presented)
{
    if (!presented || strlen(presented) > TOKEN_MAX) return NULL;
    uint8_t h[SERVE_HASH_BYTES];
    if (hash_token(presented, h) != 0) return NULL;
    serve_user *found = NULL;
    for (int i = 0; i < a->n_users; i++) {
        unsigned diff = 0;
        for (int k = 0; k < SERVE_HASH_BYTES; k++) diff |= (unsigned)(h[k] ^ a->users[i].hash[k]);
        if (!diff) found = &a->users[i];
    }
    return found;
}

void serve_auth_free(serve_auth *a)
{
    free(a->users);
    a->users = NULL;
    a->n_users = 0;
}
