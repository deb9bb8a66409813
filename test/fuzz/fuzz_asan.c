/*
 * fuzz_asan.c - AddressSanitizer settings of every fuzz target (linked into
 * the ctest tests and the libFuzzer binaries alike).
 */

/* A peer announces any length up to 2^40 - 1 bytes, and the core then
 * allocates for an unexpected message of that length: where that cannot
 * be had, malloc's NULL must end the connection with an error (as in a
 * build without sanitizers), not ASan the process. Above 64 MiB ASan
 * fails at once (else it maps and poisons the shadow of gigabytes). */
__attribute__((visibility("default"))) const char *__asan_default_options(void)
{
    return "allocator_may_return_null=1:max_allocation_size_mb=64";
}
