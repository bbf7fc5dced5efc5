/* CRC-32 as used by zlib and java.util.zip.CRC32 (reflected polynomial 0xEDB88320,
 * init 0xFFFFFFFF, final xor 0xFFFFFFFF), with a runtime-selected PCLMULQDQ fast path.
 *
 * The environment variable PYMQ_CRC32_IMPL ("slice-by-8" or "pclmulqdq"), read once
 * when the library is loaded, caps the implementation pymq_crc32 uses (for testing). */
#ifndef PYMQ_CRC32_H
#define PYMQ_CRC32_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* zlib-compatible: pymq_crc32(0, buf, len) == zlib crc32(0, buf, len); chaining works like zlib's.
 * buf may be NULL when len == 0 (the crc is then returned unchanged). */
uint32_t pymq_crc32(uint32_t crc, const unsigned char *buf, size_t len);
/* the portable path only (for tests): same results */
uint32_t pymq_crc32_portable(uint32_t crc, const unsigned char *buf, size_t len);
/* name of the implementation pymq_crc32 dispatches to, e.g. "pclmulqdq" or "slice-by-8" */
const char *pymq_crc32_impl(void);

#ifdef __cplusplus
}
#endif

#endif /* PYMQ_CRC32_H */
