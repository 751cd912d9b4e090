//! How many copy engines a host device has, and where they run.
//!
//! On a machine with fewer cores than engine threads (two copy engines and the compute
//! workers), a device has one copy engine, which copies in both directions take turns on, as
//! on a GPU with one copy engine ([`copy_engines`], CP5): the copies then keep one core busy
//! and the kernels another, instead of three busy threads time-sharing two cores.
//!
//! There, each copy engine thread is also pinned to a core of its own. Why: traced with `perf
//! sched` on the demo's pipeline (64 MiB, 4 streams × 64 chunks, two copy engines): both copy
//! engines sat on one core and took turns there for the whole run, each at half speed, while
//! the compute worker had the other core to itself and idled about a third of the time,
//! waiting for copies that were queued behind each other. A thread that waits for a busy core
//! is not moved to one that is idle for less than the scheduler's migration cost (0.5 ms), and
//! an engine thread woken while every core is busy queues on its previous core. Pinned, the
//! copy engines run on cores of their own and the compute workers go wherever there is room
//! (they are not pinned).
//!
//! Only Linux pins; elsewhere, and on machines with a core for every engine thread, nothing is
//! pinned.

/// The cores this process may run on, lowest first (`None` where that cannot be known).
#[cfg(target_os = "linux")]
fn allowed_cpus() -> Option<Vec<usize>> {
    // SAFETY: `set` is a plain bit set that sched_getaffinity fills; its size is passed with it.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        set
    };
    Some(
        (0..libc::CPU_SETSIZE as usize)
            // SAFETY: CPU_ISSET reads a bit of the set filled above, below CPU_SETSIZE.
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
            .collect(),
    )
}

/// Whether this machine has fewer cores than a device with `workers` compute workers has
/// engine threads (two copy engines and the workers): where that holds, the device has one copy
/// engine, its copy engine threads are pinned and only one idle compute worker polls for work.
pub(super) fn fewer_cores_than_engines(workers: u32) -> bool {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores < workers as usize + 2
}

/// How many copy engines a host device with `workers` compute workers has
/// (`CUEFLOW_HOST_COPY_ENGINES` decides where set): two, one for each direction, where the
/// machine has a core for each of them beside the workers; else one, which copies of both
/// directions take turns on (as on a GPU with one copy engine, CP5). With two engine threads
/// on a 2-core machine the copies and the kernels time-share the cores: the chunked pipeline
/// (`cueflow demo`, 64 MiB, 1 worker) took 7.3-9.7 ms against 5.5-6.1 ms with one engine.
pub(super) fn copy_engines(workers: u32) -> u32 {
    if let Some(n) = crate::config::host_copy_engines() {
        return n;
    }
    match fewer_cores_than_engines(workers) {
        true => 1,
        false => 2,
    }
}

/// The core copy engine `which` (0: host→device, 1: device→host) should run on, for a device
/// with `workers` compute workers: the `which`-th allowed core, where the machine has fewer
/// cores than engine threads (two copy engines and the workers) but at least two.
pub(super) fn copy_engine_core(which: usize, workers: u32) -> Option<usize> {
    #[cfg(target_os = "linux")]
    {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cores < 2 || !fewer_cores_than_engines(workers) || which > 1 {
            return None;
        }
        allowed_cpus()?.get(which).copied()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (which, workers);
        None
    }
}

/// Pin the calling thread to `cpu`; false if the system refused (the thread then runs wherever
/// the system puts it, as before).
pub(super) fn pin_current_thread(cpu: usize) -> bool {
    #[cfg(target_os = "linux")]
    {
        if cpu >= libc::CPU_SETSIZE as usize {
            return false;
        }
        // SAFETY: `set` is a plain bit set built with CPU_ZERO/CPU_SET for a core below
        // CPU_SETSIZE and passed with its size to sched_setaffinity for this thread (0).
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_ZERO(&mut set);
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = cpu;
        false
    }
}
