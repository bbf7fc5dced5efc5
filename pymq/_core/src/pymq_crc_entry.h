/* The record's own CRC entry (RocketMQ 5's enabledAppendPropCRC): "__CRC32#" \x01, ten
 * decimal digits, least significant first, \x02. Reading the digits eight at a time
 * (SWAR) instead of one by one: a pull checks one entry per record; writing them two at
 * a time from a table. */
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

/* The two digits of n = 0..99, least significant first, at 2n. */
static const char pymq_digit_pairs[201] =
    "00102030405060708090011121314151617181910212223242526272829203132333435363738393"
    "04142434445464748494051525354555657585950616263646566676869607172737475767778797"
    "0818283848586878889809192939495969798999";

/* Write v (< 10^10) as the entry's ten digits at p, least significant first: split into
 * two-digit parts by a few independent multiplications (the digit-by-digit loop is a
 * chain of ten dependent divisions, ~50 cycles a record on the writer's path). */
static inline void pymq_crc_put_digits(char *p, uint32_t v) {
    uint32_t top = v / 100000000u, low = v - top * 100000000u;     /* top < 43 */
    uint32_t hi4 = low / 10000u, lo4 = low - hi4 * 10000u;
    uint32_t a = lo4 / 100u, b = lo4 - a * 100u, c = hi4 / 100u, d = hi4 - c * 100u;
    memcpy(p, pymq_digit_pairs + 2 * b, 2);
    memcpy(p + 2, pymq_digit_pairs + 2 * a, 2);
    memcpy(p + 4, pymq_digit_pairs + 2 * d, 2);
    memcpy(p + 6, pymq_digit_pairs + 2 * c, 2);
    memcpy(p + 8, pymq_digit_pairs + 2 * top, 2);
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
