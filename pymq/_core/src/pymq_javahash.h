/* Java's String.hashCode over UTF-16 code units, from UTF-8 bytes or from code points.
 *
 *   h = 0; for each UTF-16 unit u: h = 31*h + u   (int32 wrap-around)
 *
 * Code points above U+FFFF count as two surrogate units. Malformed UTF-8 is hashed as
 * U+FFFD per bad byte, which is what Java's decoder produces for a lone bad byte. */
#ifndef PYMQ_JAVAHASH_H
#define PYMQ_JAVAHASH_H

#include <stddef.h>
#include <stdint.h>

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
    size_t i = 0, adv;
    while (i < n) {
        if (s[i] < 0x80) { h = 31u * h + s[i]; i++; continue; }
        h = pymq_java_hash_cp(h, pymq_utf8_next(s, n, i, &adv));
        i += adv;
    }
    return h;
}

static inline int32_t pymq_java_hash_utf8(const char *buf, size_t n) {
    const unsigned char *s = (const unsigned char *)buf;
    uint32_t h = 0;
    size_t i = 0, adv;
    while (i < n) {
        if (s[i] < 0x80) { h = 31u * h + s[i]; i++; continue; }
        h = pymq_java_hash_cp(h, pymq_utf8_next(s, n, i, &adv));
        i += adv;
    }
    return (int32_t)h;
}

#endif
