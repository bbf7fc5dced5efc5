/* Java's String.hashCode over UTF-16 code units, from UTF-8 bytes or from code points.
 *
 *   h = 0; for each UTF-16 unit u: h = 31*h + u   (int32 wrap-around)
 *
 * Code points above U+FFFF count as two surrogate units. Malformed UTF-8 is hashed as
 * U+FFFD per bad byte, which is what Java's decoder produces for a lone bad byte.
 *
 * ASCII runs (what keys, unique keys and topics nearly always are) go 8 bytes a step:
 * h' = 31^8 h + 31^7 b0 + ... + 31^0 b7, the eight products independent of each other
 * instead of a chain of eight dependent multiply-adds. */
#ifndef PYMQ_JAVAHASH_H
#define PYMQ_JAVAHASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define PYMQ_P1 31u
#define PYMQ_P2 961u
#define PYMQ_P3 29791u
#define PYMQ_P4 923521u
#define PYMQ_P5 28629151u
#define PYMQ_P6 887503681u
#define PYMQ_P7 1742810335u     /* 31^7 mod 2^32 */
#define PYMQ_P8 2487512833u     /* 31^8 mod 2^32 */

/* Hash the leading ASCII bytes of s[0..n) 8 at a time; returns how many were taken
 * (a multiple of 8, stopping before the first 8-byte block holding a non-ASCII byte). */
static inline size_t pymq_java_hash_ascii8(uint32_t *hp, const unsigned char *s, size_t n) {
    uint32_t h = *hp;
    size_t i = 0;
    uint64_t w;
    while (i + 8 <= n) {
        memcpy(&w, s + i, 8);
        if (w & 0x8080808080808080ull) break;
        h = h * PYMQ_P8
            + (uint32_t)s[i] * PYMQ_P7 + (uint32_t)s[i + 1] * PYMQ_P6
            + (uint32_t)s[i + 2] * PYMQ_P5 + (uint32_t)s[i + 3] * PYMQ_P4
            + (uint32_t)s[i + 4] * PYMQ_P3 + (uint32_t)s[i + 5] * PYMQ_P2
            + (uint32_t)s[i + 6] * PYMQ_P1 + (uint32_t)s[i + 7];
        i += 8;
    }
    *hp = h;
    return i;
}

static inline uint32_t pymq_java_hash_cp(uint32_t h, uint32_t cp) {
    if (cp < 0x10000) return 31u * h + cp;
    cp -= 0x10000;
    h = 31u * h + (0xD800u + (cp >> 10));
    return 31u * h + (0xDC00u + (cp & 0x3FFu));
}

/* Decode one UTF-8 sequence at s[i..n); return its code point and set *adv. */
static inline uint32_t pymq_utf8_next(const unsigned char *s, size_t n, size_t i, size_t *adv) {
    unsigned char c = s[i];
    uint32_t cp;
    size_t need;
    if (c < 0x80) { *adv = 1; return c; }
    if (c >= 0xC2 && c <= 0xDF) { need = 1; cp = c & 0x1Fu; }
    else if (c >= 0xE0 && c <= 0xEF) { need = 2; cp = c & 0x0Fu; }
    else if (c >= 0xF0 && c <= 0xF4) { need = 3; cp = c & 0x07u; }
    else { *adv = 1; return 0xFFFDu; }
    if (n - i <= need) { *adv = 1; return 0xFFFDu; }
    for (size_t k = 1; k <= need; k++) {
        unsigned char cc = s[i + k];
        if ((cc & 0xC0u) != 0x80u) { *adv = 1; return 0xFFFDu; }
        cp = (cp << 6) | (cc & 0x3Fu);
    }
    /* reject overlong forms and surrogates, as a strict decoder does */
    if ((need == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
        (need == 3 && (cp < 0x10000 || cp > 0x10FFFF))) { *adv = 1; return 0xFFFDu; }
    *adv = need + 1;
    return cp;
}

/* Continue a hash over more UTF-8 text: hash(a + b) == pymq_java_hash_utf8_from(hash(a), b). */
static inline uint32_t pymq_java_hash_utf8_from(uint32_t h, const char *buf, size_t n) {
    const unsigned char *s = (const unsigned char *)buf;
    size_t i = pymq_java_hash_ascii8(&h, s, n), adv;
    while (i < n) {
        if (s[i] < 0x80) { h = 31u * h + s[i]; i++; continue; }
        h = pymq_java_hash_cp(h, pymq_utf8_next(s, n, i, &adv));
        i += adv;
    }
    return h;
}

static inline int32_t pymq_java_hash_utf8(const char *buf, size_t n) {
    return (int32_t)pymq_java_hash_utf8_from(0u, buf, n);
}

#endif
