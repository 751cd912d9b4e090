//! W7 tests (SPEC AC7): pages a launch declares read-only are mapped so in the worker while it
//! runs — a write through them is a fault naming the argument, counted per holder, released
//! after the launch — with the test entries of `tests.rs`.

use std::time::Duration;

use super::arena::PAGE;
use super::tests::{entries, floats, one_block, open_with, ptr_param};
use super::{Call, ReadOnly, WorkerFault};
use crate::backend::contract::device::Backend;

/// W7: a write through pages a launch holds read-only is a fault naming the launch's kernel
/// and argument; once the launch is over the pages are writable again.
#[test]
fn w7_a_write_through_read_only_pages_names_the_argument_and_they_are_released() {
    let Some(so) = entries() else { return };
    let dev = open_with(9101, 2);
    let w = dev.kernel_worker().unwrap();
    let a = dev.alloc_device(4 * PAGE).unwrap();
    let pages = ReadOnly {
        range: a.addr as usize..a.addr as usize + 4 * PAGE,
        arg: 0,
    };
    let (pa, at) = (ptr_param(&a), 100u32.to_ne_bytes());
    let params: [&[u8]; 2] = [&pa, &at];
    let call = |symbol: &str, read_only: &[ReadOnly]| {
        w.call(&Call {
            so_path: &so,
            symbol,
            name: symbol,
            launch: one_block(1),
            params: &params,
            read_only,
            limit: None,
        })
    };
    // Held and released: the pages are writable after the launch that held them.
    call("cueflow_run_empty", std::slice::from_ref(&pages)).unwrap();
    call("cueflow_run_write_at", &[]).unwrap();
    assert_eq!(floats(&a)[100], 1.0);
    // A write while held: the fault names the argument.
    match call("cueflow_run_write_at", std::slice::from_ref(&pages)) {
        Err(
            f @ WorkerFault::Crashed {
                this_call: true, ..
            },
        ) => {
            let m = f.to_string();
            assert!(m.contains("argument 0") && m.contains("read-only"), "{m}");
        }
        other => panic!("expected a crash, got {other:?}"),
    }
}

/// W7: pages held by two launches at once stay read-only until both are over (a count per
/// holder, as the blocks of one launch run as several requests); a write by a launch that
/// did not declare them, meanwhile, names the launch that holds them.
#[test]
fn w7_holders_are_counted_and_another_launchs_write_names_the_holder() {
    let Some(so) = entries() else { return };
    let dev = open_with(9102, 3);
    let w = dev.kernel_worker().unwrap();
    let a = dev.alloc_device(2 * PAGE).unwrap();
    super::tests::fill(&a, 1);
    let pages = [ReadOnly {
        range: a.addr as usize..a.addr as usize + 2 * PAGE,
        arg: 0,
    }];
    let (pa, n, us, at) = (
        ptr_param(&a),
        ((2 * PAGE / 4) as u32).to_ne_bytes(),
        600_000u32.to_ne_bytes(),
        3u32.to_ne_bytes(),
    );
    let run = |symbol: &str, params: &[&[u8]], read_only: &[ReadOnly]| {
        w.call(&Call {
            so_path: &so,
            symbol,
            name: symbol,
            launch: one_block(1),
            params,
            read_only,
            limit: None,
        })
    };
    std::thread::scope(|s| {
        let reader = s.spawn(|| run("cueflow_run_read_for", &[&pa, &n, &us], &pages));
        std::thread::sleep(Duration::from_millis(100));
        // A second holder comes and goes; the reader still holds the pages.
        run("cueflow_run_empty", &[], &pages).unwrap();
        let r = run("cueflow_run_write_at", &[&pa, &at], &[]);
        match r {
            Err(
                f @ WorkerFault::Crashed {
                    this_call: true, ..
                },
            ) => {
                let m = f.to_string();
                assert!(
                    m.contains("cueflow_run_read_for") && m.contains("argument 0"),
                    "{m}"
                );
            }
            other => panic!("expected a crash, got {other:?}"),
        }
        assert!(
            reader.join().unwrap().is_err(),
            "the crash ended the reader too"
        );
    });
}

/// W7 with A4: pages left read-only after a launch (no other launch ran) lose their record
/// when their block is freed, so a later launch never "releases" them to read-write: a write
/// to the freed block still faults.
#[test]
fn w7_a_freed_block_is_never_made_writable_again() {
    let Some(so) = entries() else { return };
    let dev = open_with(9103, 2);
    let w = dev.kernel_worker().unwrap();
    let a = dev.alloc_device(2 * PAGE).unwrap();
    let pages = [ReadOnly {
        range: a.addr as usize..a.addr as usize + 2 * PAGE,
        arg: 0,
    }];
    let (pa, at) = (ptr_param(&a), 5u32.to_ne_bytes());
    let params: [&[u8]; 2] = [&pa, &at];
    let call = |symbol: &str, read_only: &[ReadOnly]| {
        w.call(&Call {
            so_path: &so,
            symbol,
            name: symbol,
            launch: one_block(1),
            params: &params,
            read_only,
            limit: None,
        })
    };
    call("cueflow_run_empty", &pages).unwrap();
    drop(a);
    match call("cueflow_run_write_at", &[]) {
        Err(WorkerFault::Crashed {
            this_call: true, ..
        }) => {}
        other => panic!("a write to a freed block did not fault: {other:?}"),
    }
}
