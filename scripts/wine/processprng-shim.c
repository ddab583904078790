/* Test-only stand-in for Windows' bcryptprimitives.dll under Debian's wine 8, which lacks it.
 * Rust's standard library (1.78 and later) imports ProcessPrng from that DLL, so without it no
 * Rust program starts under that wine. scripts/windows builds this with mingw into a temporary
 * directory beside the exe it tests; it is never shipped (docs/state.md §S4.5). */
#include <windows.h>

/* RtlGenRandom, exported by advapi32 under this name. */
BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
    while (len > 0) {
        ULONG chunk = len > 0x40000000 ? 0x40000000 : (ULONG)len;
        if (!SystemFunction036(data, chunk)) {
            return FALSE;
        }
        data += chunk;
        len -= chunk;
    }
    return TRUE;
}
