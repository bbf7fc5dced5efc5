/* The record's own CRC entry (RocketMQ 5's enabledAppendPropCRC): "__CRC32#" \x01, ten
 * decimal digits, least significant first, \x02. Reading the digits eight at a time
 * (SWAR) instead of one by one: a pull checks one entry per record. */
#ifndef PYMQ_CRC_ENTRY_H
#define PYMQ_CRC_ENTRY_H

#include <stdint.h>
#include <string.h>

/* Whether the 9 bytes at p are "__CRC32#\x01". */
static inline int pymq_is_crc_head(const char *p) {
    uint64_t x, h;
    memcpy(&x, p, 8);
    memcpy(&h, "__CRC32#", 8);
    return x == h && p[8] == 1;
}

/* Whether the 8 bytes in x (as loaded from memory) are all ASCII digits. */
static inline int pymq_swar_digits(uint64_t x) {
    return (x & 0xF0F0F0F0F0F0F0F0ULL) == 0x3030303030303030ULL
        && ((x + 0x0606060606060606ULL) & 0xF0F0F0F0F0F0F0F0ULL) == 0x3030303030303030ULL;
}

/* The value of the ten digits at p (p[0] the least significant), or -1 when one of
 * them is not a digit. */
static inline int64_t pymq_crc_digits(const char *p) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t x, v, pairs, quads;
    unsigned char d8 = (unsigned char)p[8] - '0', d9 = (unsigned char)p[9] - '0';
    memcpy(&x, p, 8);
    if (!pymq_swar_digits(x) || d8 > 9 || d9 > 9)
        return -1;
    v = x - 0x3030303030303030ULL;                  /* byte k: digit k (weight 10^k) */
    pairs = (v & 0x000F000F000F000FULL) + 10 * ((v >> 8) & 0x000F000F000F000FULL);
    quads = (pairs & 0x0000FFFF0000FFFFULL) + 100 * ((pairs >> 16) & 0x0000FFFF0000FFFFULL);
    return (int64_t)((quads & 0xFFFFFFFFULL) + 10000 * (quads >> 32))
           + (int64_t)(d8 + 10 * d9) * 100000000LL;
#else
    int64_t v = 0;
    int i;
    for (i = 9; i >= 0; i--) {
        unsigned char d = (unsigned char)p[i] - '0';
        if (d > 9)
            return -1;
        v = v * 10 + d;
    }
    return v;
#endif
}

#endif
