//! The race sanitizer's corpus (SPEC AC1–AC5): racy programs that must each be reported with
//! both call sites right, correctly synchronized programs that must stay silent, and the
//! sanitizer's modes, lints and automatic ordering. Every program runs on every backend present
//! (`host::name`, `cuda::name`; CUDA prints `SKIP cuda: <reason>` without a GPU).
//!
//! A racy program returns the source lines of the call pairs that race, `(earlier, later)`,
//! taken with [`at!`] on the line of the call; the runner checks that a report names exactly
//! those lines of this file. On the host backend a racy program still runs without a data race
//! (AC6 runs conflicting accesses in enqueue order); on CUDA it really races, which is harmless
//! for the values the corpus uses.
//!
//! Run: `cargo test -p cueflow --test sanitizer`.

mod correct;
mod graph_chains;
mod graphs;
mod modes;
mod racy;
mod support;

/// Instantiate each racy program once per backend.
macro_rules! racy {
    ($($name:ident,)*) => {
        const RACY: &[&str] = &[$(stringify!($name)),*];
        /// Every racy program, by name.
        pub const RACY_PROGRAMS: &[(&str, racy::Program)] =
            &[$((stringify!($name), racy::$name)),*];
        mod racy_host {
            $( #[test] fn $name() { $crate::support::racy("host", $crate::racy::$name) } )*
        }
        mod racy_cuda {
            $( #[test] fn $name() { $crate::support::racy("cuda", $crate::racy::$name) } )*
        }
    };
}

/// Instantiate each graph program of module `$m` (file `$file`; racy and correct) once per
/// backend, in modules `$host` and `$cuda`.
macro_rules! graph_programs {
    ($m:ident, $file:literal, $host:ident, $cuda:ident;
     racy: [$($r:ident,)*] correct: [$($c:ident,)*]) => {
        mod $host {
            $( #[test] fn $r() { $crate::support::racy_in("host", $file, $crate::$m::$r) } )*
            $( #[test] fn $c() { $crate::support::correct("host", $crate::$m::$c) } )*
        }
        mod $cuda {
            $( #[test] fn $r() { $crate::support::racy_in("cuda", $file, $crate::$m::$r) } )*
            $( #[test] fn $c() { $crate::support::correct("cuda", $crate::$m::$c) } )*
        }
    };
}

graph_programs! {
    graphs, "graphs.rs", graphs_host, graphs_cuda;
    racy: [
    built_graph_launch_races_with_stream_write,
    conditional_body_that_may_run_races_with_stream_read,
    graph_memory_used_by_a_stream_not_ordered_after_the_launch,
    graph_memory_freed_by_a_stream_not_ordered_after_the_launch,
    stream_after_a_record_node_races_with_a_node_it_does_not_depend_on,
    stream_after_a_record_node_races_with_the_node_after_it,
    node_beside_a_wait_node_races_with_the_waited_work,
    node_before_a_wait_node_on_its_chain_races_with_the_waited_work,
    two_unordered_if_nodes_write_one_buffer,
    two_unordered_nodes_of_a_conditional_body,
    two_unordered_copy_nodes_write_one_buffer,
    graph_host_node_beside_a_copy_node,
    graph_host_node_beside_a_wait_node,
    relaunch_not_ordered_after_a_streams_free_of_its_memory,
    auto_free_relaunch_while_another_stream_uses_the_memory,
    free_node_of_another_graph_not_ordered_after_the_launch,
    ]
    correct: [
    built_graph_launch_then_event_to_other_stream,
    conditional_body_then_event_to_other_stream,
    graph_memory_used_and_freed_after_waiting_for_the_launch,
    graph_memory_freed_by_another_graph_in_order,
    stream_after_a_record_node_that_depends_on_both_nodes,
    stream_after_the_last_record_node_of_a_chain,
    nodes_after_a_wait_node_use_the_waited_work,
    node_after_a_wait_node_on_its_chain_uses_the_waited_work,
    one_graph_launched_on_two_streams,
    graph_refused_at_instantiation_reports_no_race,
    ordered_nodes_of_a_conditional_body,
    graph_host_nodes_read_what_comes_before_them,
    graph_host_node_after_a_wait_node,
    auto_free_relaunch_after_the_other_streams_use,
    relaunch_after_dropping_the_handed_out_memory,
    ]
}

// The event record nodes along chains (issue 31's linear event-node groups).
graph_programs! {
    graph_chains, "graph_chains.rs", graph_chains_host, graph_chains_cuda;
    racy: [
    record_sets_of_one_size_and_first_record_are_told_apart,
    event_after_a_launch_does_not_order_the_next_launch,
    record_node_of_a_launch_does_not_order_the_next_launch,
    node_beside_a_fan_joined_before_a_record_node_races,
    record_node_below_a_chains_end_does_not_order_the_next_launch,
    ]
    correct: [
    record_sets_of_one_size_and_first_record_each_ordered,
    fan_joined_before_a_record_node_ordered,
    ]
}

/// Instantiate each correct program once per backend.
macro_rules! correct {
    ($($name:ident,)*) => {
        const CORRECT: &[&str] = &[$(stringify!($name)),*];
        mod correct_host {
            $( #[test] fn $name() { $crate::support::correct("host", $crate::correct::$name) } )*
        }
        mod correct_cuda {
            $( #[test] fn $name() { $crate::support::correct("cuda", $crate::correct::$name) } )*
        }
    };
}

/// Instantiate each mode test once per backend.
macro_rules! modes {
    ($($name:ident,)*) => {
        mod modes_host {
            $( #[test] fn $name() { $crate::support::plain("host", $crate::modes::$name) } )*
        }
        mod modes_cuda {
            $( #[test] fn $name() { $crate::support::plain("cuda", $crate::modes::$name) } )*
        }
    };
}

racy! {
    copy_stream_to_compute_stream_without_wait,
    two_readers_then_a_writer,
    overlapping_subranges_at_different_offsets,
    subranges_overlapping_by_one_element,
    slice_of_a_slice_overlaps,
    host_unchecked_read_during_d2h_copy,
    host_fn_reads_another_streams_copy_unchecked,
    host_fn_reads_what_another_stream_writes,
    pageable_h2d_on_legacy_then_non_blocking_kernel,
    graph_replay_races_with_stream_work,
    stream_work_races_with_graph_replay,
    two_graphs_on_two_streams,
    kernel_write_then_d2h_on_another_stream,
    read_then_memset_on_another_stream,
    two_memsets_on_two_streams,
    d2d_source_written_by_another_stream,
    event_recorded_before_the_write,
    event_waited_by_the_wrong_stream,
    event_recorded_on_the_wrong_stream,
    legacy_write_then_non_blocking_read,
    per_thread_stream_does_not_order_with_others,
    expired_record,
    overridden_record,
    all_reads_checked_failing,
    alloc_async_used_on_another_stream_without_wait,
    free_async_while_another_stream_uses_a_clone,
    atomic_kernel_and_plain_memset,
    atomic_kernel_and_plain_read,
    pinned_source_overwritten_by_another_stream,
    h2h_destination_read_by_another_stream,
    write_value_and_pageable_read,
    ring_of_three_streams_missing_one_wait,
    completion_not_awaited_is_no_sync,
    wait_stream_on_the_wrong_stream,
    mapped_kernels_on_two_streams_without_wait,
    managed_kernel_then_copy_on_another_stream,
}

correct! {
    copy_stream_to_compute_stream_with_wait,
    host_fn_reads_its_streams_copy_unchecked,
    host_fn_reads_before_its_streams_later_write,
    two_readers_then_a_writer_with_waits,
    adjacent_subranges_on_two_streams,
    disjoint_chunks_on_four_streams,
    pageable_h2d_on_legacy_then_blocking_kernel,
    blocking_write_then_legacy_read,
    per_thread_write_then_legacy_read,
    same_stream_write_then_read,
    rerecord_after_wait,
    polling_loop_on_stream_query,
    polling_loop_on_event_query,
    completion_awaited_then_host_access,
    event_completion_awaited_then_other_stream,
    atomics_from_two_streams,
    write_value_and_atomic_kernel,
    branch_sync,
    chain_sync,
    all_reads_checked,
    stream_synchronize_orders,
    device_synchronize_orders,
    event_synchronize_orders,
    elapsed_answer_orders,
    wait_stream_orders,
    graph_replay_then_same_stream,
    graph_replay_then_event_to_other_stream,
    alloc_async_then_event_to_other_stream,
    free_async_after_waiting_for_users,
    pinned_read_view_after_d2h,
    read_pageable_then_write_elsewhere,
    write_pageable_then_kernel_same_stream,
    two_events_joined_before_reading_both,
    host_function_between_write_and_read,
    mapped_halves_on_two_streams,
    managed_kernel_then_event_to_other_stream,
}

modes! {
    error_mode_refuses_and_enqueues_nothing,
    panic_mode_panics_before_enqueuing,
    off_mode_reports_nothing,
    report_names_stream_kernel_argument_and_fix,
    report_for_host_access_names_the_fix,
    reports_once_per_pair_of_sites,
    lint_pageable_copy_beside_pinned_copies,
    lint_legacy_work_serializes_blocking_streams,
    lint_wait_on_never_recorded_event,
    auto_order_stream_orders_and_stays_silent,
    auto_order_device_orders_the_racy_corpus,
    auto_order_keeps_disjoint_chunks_concurrent,
    auto_order_waits_for_exactly_the_conflicts,
    a_refused_call_orders_nothing,
    a_refused_graph_launch_orders_nothing,
}

#[test]
fn corpus_is_big_enough() {
    assert!(RACY.len() >= 30, "{} racy programs", RACY.len());
    assert!(CORRECT.len() >= 30, "{} correct programs", CORRECT.len());
}
