/* Checks pymq_crc32 and pymq_crc32_portable against zlib's crc32.
 * Build: cc -O2 -Wall -Werror -Ipymq/_core/src tests/c/test_crc32.c pymq/_core/src/pymq_crc32.c -lz
 * Every buffer is a fresh malloc ending exactly at buf + len, so an AddressSanitizer
 * build catches any read past the end.  Exit code 0 on success. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "pymq_crc32.h"

static int failures;
static uint32_t early_crc;

/* runs before the library's own constructor: exercises the lazy first-call dispatch */
__attribute__((constructor(101))) static void early_call(void)
{
    early_crc = pymq_crc32(0, (const unsigned char *)"123456789", 9);
}
static uint64_t rng = 0x9E3779B97F4A7C15u;

static uint32_t rnd(void)   /* xorshift64* */
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (uint32_t)((rng * 0x2545F4914F6CDD1Du) >> 32);
}

static uint32_t zcrc(uint32_t crc, const unsigned char *p, size_t len)
{
    while (len > 0x40000000u) {   /* zlib takes a uInt length */
        crc = (uint32_t)crc32(crc, p, 0x40000000u);
        p += 0x40000000u;
        len -= 0x40000000u;
    }
    return (uint32_t)crc32(crc, p, (uInt)len);
}

static void expect(const char *what, size_t len, size_t align, uint32_t init, uint32_t got, uint32_t want)
{
    if (got == want)
        return;
    if (++failures <= 20)
        printf("FAIL %s len=%zu align=%zu init=%08x: got %08x want %08x\n", what, len, align,
               (unsigned)init, (unsigned)got, (unsigned)want);
}

/* src[0..len) copied to an allocation that ends exactly at the end of the data */
static unsigned char *place(const unsigned char *src, size_t len, size_t align, unsigned char **block)
{
    *block = malloc(len + align ? len + align : 1);
    if (!*block) {
        perror("malloc");
        exit(2);
    }
    memcpy(*block + align, src, len);
    return *block + align;
}

static void check(const unsigned char *src, size_t len, size_t align, uint32_t init)
{
    unsigned char *block, *buf = place(src, len, align, &block);
    uint32_t want = zcrc(init, buf, len);

    expect("pymq_crc32", len, align, init, pymq_crc32(init, buf, len), want);
    expect("pymq_crc32_portable", len, align, init, pymq_crc32_portable(init, buf, len), want);
    free(block);
}

int main(void)
{
    const size_t big = (size_t)1 << 20;
    unsigned char *data = malloc(big + 16);
    if (!data)
        return 2;
    for (size_t i = 0; i < big + 16; i++)
        data[i] = (unsigned char)rnd();
    printf("implementation: %s\n", pymq_crc32_impl());

    /* known vectors */
    expect("123456789 before constructors", 9, 0, 0, early_crc, 0xCBF43926u);
    expect("123456789", 9, 0, 0, pymq_crc32(0, (const unsigned char *)"123456789", 9), 0xCBF43926u);
    expect("123456789 portable", 9, 0, 0, pymq_crc32_portable(0, (const unsigned char *)"123456789", 9),
           0xCBF43926u);
    expect("hello", 5, 0, 0, pymq_crc32(0, (const unsigned char *)"hello", 5) & 0x7FFFFFFFu, 907060870u);
    expect("NULL, 0", 0, 0, 0x12345678u, pymq_crc32(0x12345678u, NULL, 0), 0x12345678u);
    expect("NULL, 0 portable", 0, 0, 0, pymq_crc32_portable(0, NULL, 0), 0);

    /* every length 0..2048 at every alignment 0..15, with a zero and a random initial crc */
    for (size_t len = 0; len <= 2048; len++)
        for (size_t align = 0; align < 16; align++) {
            check(data + (len * 7 + align) % 4096, len, align, 0);
            check(data + align, len, align, rnd());
        }

    /* random lengths up to 1 MiB */
    for (int i = 0; i < 60; i++) {
        size_t len = rnd() % (big + 1), align = rnd() % 16;
        check(data + rnd() % 16, len, align, i & 1 ? rnd() : 0);
    }
    check(data, big, 0, 0);

    /* chaining: crc(crc(a), b) == crc(a + b) for random splits */
    for (int i = 0; i < 2000; i++) {
        size_t len = i < 1000 ? rnd() % 600 : rnd() % (big + 1), cut = len ? rnd() % (len + 1) : 0;
        uint32_t init = rnd(), want = zcrc(init, data, len);
        expect("chained", len, cut, init, pymq_crc32(pymq_crc32(init, data, cut), data + cut, len - cut), want);
        expect("chained portable", len, cut, init,
               pymq_crc32_portable(pymq_crc32_portable(init, data, cut), data + cut, len - cut), want);
    }

    free(data);
    if (failures) {
        printf("%d failure(s)\n", failures);
        return 1;
    }
    printf("all crc32 checks passed\n");
    return 0;
}
