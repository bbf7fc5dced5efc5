/* CRC-32 (zlib's, initial value 0) of one short record, for the pull's CRC check on read.
 *
 * pymq_crc32.c folds a short buffer one 16-byte chunk at a time (two PCLMULQDQ and a
 * constant load per chunk, about 180 instructions for the ~170 bytes a 100-byte message's
 * record covers). A record checked on read is short and its length known, so this one
 * folds four chunks per instruction: the same scheme (every chunk multiplied by
 * x^(128 k) mod P for its distance k to the last chunk, the products xored, then Barrett
 * reduction; see pymq_crc32.c and ci/gen_crc32_constants.py for the constants), with
 * VPCLMULQDQ on 512-bit registers, masked loads for a partial group (nothing is read
 * outside [p, p + len)), and the four distances of a group loaded at once from a table in
 * descending order. About 45 instructions for 170 bytes: 7.8 ns a record in a C loop on
 * the 2-vCPU EPYC test VM, against 14.8 ns through pymq_crc32.
 *
 * pymq_crc_record_fast(p, len) needs VPCLMULQDQ + AVX-512F (the caller checks, once:
 * pymq_crc_record_usable()) and 16 < len <= PYMQ_CRC_RECORD_MAX; the reader falls back to
 * record_crc_ok otherwise. */
#ifndef PYMQ_CRC_RECORD_H
#define PYMQ_CRC_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "pymq_crc_entry.h"
#include "pymq_hton.h"

#define PYMQ_CRC_RECORD_MAX 272     /* a head of 1..16 bytes and at most 16 whole chunks */

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define PYMQ_CRC_RECORD_FN __attribute__((target("pclmul,sse4.1,avx512f,vpclmulqdq")))

/* by_distance[i] = { F(128k+64), F(128k) } for k = 16 - i (k = 0 and the three entries
 * after it are zero): fold a 16-byte chunk forward by k chunks. Loaded four at a time from
 * index 17 - n + 4g: the distances n-1-4g .. n-4-4g of group g's chunks. */
static const uint64_t pymq_crc_by_distance[20][2] __attribute__((aligned(64))) = {
    { 0x7cc8e1e700000000, 0x03f9f86300000000 }, /* k = 16 */
    { 0x27d0443c00000000, 0xc4d49c3900000000 }, /* k = 15 */
    { 0x8f739cb400000000, 0xd63a56a600000000 }, /* k = 14 */
    { 0x733ffa0b00000000, 0x523d48c400000000 }, /* k = 13 */
    { 0x67f7947600000000, 0xc56d949600000000 }, /* k = 12 */
    { 0xdeb15a1f00000000, 0xf09a54ac00000000 }, /* k = 11 */
    { 0x199560db00000000, 0x1d5dce4400000000 }, /* k = 10 */
    { 0x72d2649a00000000, 0x6dd804d900000000 }, /* k = 9 */
    { 0x7d657a1000000000, 0x7406fa9500000000 }, /* k = 8 */
    { 0x019866e800000000, 0xc64ac0b800000000 }, /* k = 7 */
    { 0x759fc69d00000000, 0x101a233100000000 }, /* k = 6 */
    { 0x5a03a0cf00000000, 0x8e42b13e00000000 }, /* k = 5 */
    { 0x653d982200000000, 0xcad38e8f00000000 }, /* k = 4 */
    { 0x69ccfc0d00000000, 0x2a28386200000000 }, /* k = 3 */
    { 0x9570d49500000000, 0x01b5fd1d00000000 }, /* k = 2 */
    { 0x65673b4600000000, 0x9ba54c6f00000000 }, /* k = 1 */
    { 0, 0 }, { 0, 0 }, { 0, 0 }, { 0, 0 },
};
/* { x^96 mod P, mu' } and { P, 0 }: pymq_crc32.c's reduce_k and poly_k */
static const uint64_t pymq_crc_reduce_k[2] __attribute__((aligned(16))) = { 0x00000000ccaa009e, 0xb4e5b025f7011640 };
static const uint64_t pymq_crc_poly_k[2] __attribute__((aligned(16))) = { 0x00000001db710641, 0 };
/* + r (r = 1..16): a PSHUFB mask moving bytes 0..r-1 to the top r bytes, zeroing the rest */
static const unsigned char pymq_crc_shift_tab[32] = {
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
};

PYMQ_CRC_RECORD_FN static inline __m128i pymq_crc_fold16(__m128i x, const uint64_t k[2])
{
    __m128i kk = _mm_load_si128((const __m128i *)k);
    return _mm_xor_si128(_mm_clmulepi64_si128(x, kk, 0x00), _mm_clmulepi64_si128(x, kk, 0x11));
}

PYMQ_CRC_RECORD_FN static uint32_t pymq_crc_record_fast(const unsigned char *p, size_t len)
{
    size_t r = ((len - 1) & 15) + 1, n = (len - r) >> 4, m = n - 1, g;   /* len > 16: n >= 1 */
    const __m128i rk = _mm_load_si128((const __m128i *)pymq_crc_reduce_k);
    /* the head (r bytes, the initial ~0 state xored into the first four bytes), as the
     * chunk ending at p + r, n chunks before the last; if r < 4 the rest of the state
     * falls into the first whole chunk */
    __m128i x = _mm_shuffle_epi8(_mm_xor_si128(_mm_loadu_si128((const __m128i *)p), _mm_cvtsi32_si128(-1)),
                                 _mm_loadu_si128((const __m128i *)(pymq_crc_shift_tab + r)));
    int spill = r < 4 ? (int)(0xFFFFFFFFu >> (8 * r)) : 0;
    __m128i last = _mm_loadu_si128((const __m128i *)(p + len - 16)), t, q;

    x = pymq_crc_fold16(x, pymq_crc_by_distance[16 - n]);
    if (m == 0) {
        last = _mm_xor_si128(last, _mm_cvtsi32_si128(spill));
    } else {
        /* the m chunks before the last, four to a 512-bit group */
        const unsigned char *c = p + r;
        __m512i acc = _mm512_setzero_si512(), d, k;
        for (g = 0; 4 * g < m; g++) {
            size_t left = m - 4 * g;
            __mmask8 mask = left >= 4 ? 0xFF : (__mmask8)((1u << (2 * left)) - 1);
            d = _mm512_maskz_loadu_epi64(mask, c + 64 * g);
            if (g == 0)
                d = _mm512_xor_si512(d, _mm512_maskz_set1_epi32(1, spill));
            k = _mm512_loadu_si512((const void *)pymq_crc_by_distance[17 - n + 4 * g]);
            acc = _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(d, k, 0x00),
                                            _mm512_clmulepi64_epi128(d, k, 0x11), acc, 0x96);
        }
        x = _mm_xor_si128(x, _mm_xor_si128(
            _mm_xor_si128(_mm512_castsi512_si128(acc), _mm512_extracti32x4_epi32(acc, 1)),
            _mm_xor_si128(_mm512_extracti32x4_epi32(acc, 2), _mm512_extracti32x4_epi32(acc, 3))));
        _mm256_zeroupper();
    }
    x = _mm_xor_si128(x, last);
    /* Barrett reduction of x * x^32 mod P (pymq_crc32.c's reduce128) */
    t = _mm_xor_si128(_mm_clmulepi64_si128(x, rk, 0x00), _mm_srli_si128(x, 8));
    q = _mm_xor_si128(_mm_clmulepi64_si128(t, rk, 0x10), t);
    t = _mm_xor_si128(t, _mm_clmulepi64_si128(q, _mm_load_si128((const __m128i *)pymq_crc_poly_k), 0x00));
    return ~(uint32_t)_mm_extract_epi32(t, 2);
}

static inline int pymq_crc_record_usable(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq")
           && __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
}

#else
static inline uint32_t pymq_crc_record_fast(const unsigned char *p, size_t len) { (void)p; (void)len; return 0; }
static inline int pymq_crc_record_usable(void) { return 0; }
#endif

/* The check of record_crc_ok (record.pyx) for the records this file handles: 1 when the
 * record at rec (total bytes) holds its checksum, 0 when not, -1 when the caller must
 * check it (fast is 0, or the covered bytes are not 17..PYMQ_CRC_RECORD_MAX). prop_crc:
 * the record ends with its own CRC entry, which covers every byte before it; else its
 * BODYCRC covers the body (body_pos, body_len). */
static inline int pymq_record_crc_check(int fast, const char *rec, ptrdiff_t total, int prop_crc,
                                        ptrdiff_t body_pos, ptrdiff_t body_len)
{
    if (!fast)
        return -1;
    if (prop_crc) {
        ptrdiff_t n = total - 20;      /* the entry: "__CRC32#" \x01, ten digits, \x02 */
        int64_t v;
        if (n <= 16 || n > PYMQ_CRC_RECORD_MAX)
            return -1;
        v = pymq_crc_digits(rec + total - 11);
        return v >= 0 && v == (int64_t)(pymq_crc_record_fast((const unsigned char *)rec, (size_t)n) & 0x7FFFFFFFu);
    }
    if (body_len <= 16 || body_len > PYMQ_CRC_RECORD_MAX)
        return -1;
    return (int32_t)(pymq_crc_record_fast((const unsigned char *)rec + body_pos, (size_t)body_len) & 0x7FFFFFFFu)
           == pymq_get_i32(rec + 8);
}

#endif
