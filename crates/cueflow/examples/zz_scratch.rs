use cueflow::{Device, Stream};
fn main() {
    let dev = Device::host_with_workers(2).unwrap();
    let auto = Stream::builder(&dev)
        .non_blocking()
        .auto_graph()
        .build()
        .unwrap();
    const BLOCK: usize = 64 << 20;
    let n = 400;
    for _ in 0..n {
        let a = auto.alloc_async::<u8>(BLOCK).unwrap();
        let b = auto.alloc_async::<u8>(BLOCK).unwrap();
        auto.memset(&a, 1).unwrap();
        auto.memset(&b, 2).unwrap();
        auto.free_async(a).unwrap();
        auto.free_async(b).unwrap();
        auto.synchronize().unwrap();
    }
    let st = dev.auto_graph_stats();
    println!(
        "{n} windows, 2 allocations each: reused {} (at most {}), {st:?}",
        st.memory_reused,
        2 * (n - 2)
    );
}
