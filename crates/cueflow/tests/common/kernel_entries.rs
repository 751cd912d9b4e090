//! The kernels of a CUDA C file, by name: what the lane-compiler test (`tests/cuda_c_lanes.rs`)
//! and the compile-time example (`examples/cuda_c_compile_times.rs`) prepare one by one.

/// The name of every `__global__ void` function of `text`, once each, in order of first
/// appearance (a kernel declared, then defined, is one entry).
pub fn kernel_entries(text: &str) -> Vec<String> {
    let mut entries: Vec<String> = Vec::new();
    for part in text.split("__global__ void").skip(1) {
        let name: String = part
            .trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() && !entries.contains(&name) {
            entries.push(name);
        }
    }
    entries
}
