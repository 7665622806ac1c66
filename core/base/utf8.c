/* utf8.c - well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing past
 * U+10FFFF), for the tokenizer's text and the safetensors header's JSON. */
#include "internal.h"

int nnt_utf8_len(const uint8_t *s, size_t n)
{
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    int need;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c == 0xE0) need = 2, lo = 0xA0;
    else if (c >= 0xE1 && c <= 0xEC) need = 2;
    else if (c == 0xED) need = 2, hi = 0x9F;
    else if (c >= 0xEE && c <= 0xEF) need = 2;
    else if (c == 0xF0) need = 3, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) need = 3;
    else if (c == 0xF4) need = 3, hi = 0x8F;
    else return -1; /* 80..C1, F5..FF never start a sequence */
    for (int k = 1; k <= need; k++) {
        if ((size_t)k >= n) return -k;
        uint8_t b = s[k];
        uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
        if (b < l || b > h) return -k;
    }
    return need + 1;
}

size_t nnt_utf8_valid_prefix(const char *text, size_t n)
{
    const uint8_t *s = (const uint8_t *)text;
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        int l = nnt_utf8_len(s + i, n - i);
        if (l <= 0) return i;
        i += (size_t)l;
    }
    return n;
}
