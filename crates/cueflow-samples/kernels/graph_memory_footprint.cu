// graphMemoryFootprint's kernel: no work, but it runs for at least `clock_count` clock ticks,
// to make a graph's run long enough that launches on other streams overlap it.
extern "C" __global__ void clock_block(clock_t clock_count)
{
    // 32-bit clock readings: their difference is right modulo 2^32 even across a wrap.
    const unsigned int start = (unsigned int)clock();
    clock_t seen = 0;
    while (seen < clock_count) {
        seen = (clock_t)((unsigned int)clock() - start);
    }
}
