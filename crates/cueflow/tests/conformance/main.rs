//! The conformance suite: at least one test per rule of `docs/spec.md`, written once against the
//! public API (`fn(&Device)`) and run on every backend present.
//!
//! Each test is instantiated twice by [`conformance!`]: `host::<name>` on a fresh
//! `Device::host()`, and `cuda::<name>` on `Device::cuda(0)` — which prints
//! `SKIP cuda: <reason>` and passes when the backend is unavailable (set
//! `CUEFLOW_REQUIRE_CUDA=1` on GPU machines to make that a failure).
//!
//! - Host tests run in parallel: host devices are independent. GPU tests run one at a time
//!   (they share one GPU and, on CUDA, one driver context), and the tests that poison their
//!   device on purpose (`support::POISONING`) run in a child process of their own there.
//! - A rule that cannot hold, or cannot be observed, on a backend goes into
//!   `support::EXPECTED_FAILURES` with the reason.
//! - Test names start with the rule id (`st1_…`, `ev6_…`); `every_rule_has_a_test` checks that
//!   every rule id of `docs/spec.md` has at least one (or is in `ELSEWHERE`, tested in a file
//!   of its own).
//!
//! Run: `cargo test -p cueflow --test conformance` (add `-- --nocapture` to see SKIP lines).

mod access;
mod autograph;
mod autograph_events;
mod autograph_memory;
mod autograph_parts;
mod capture;
mod compile;
mod conditional;
mod copies;
mod devices;
mod driver_floor;
mod errors;
mod events;
mod graph_build;
mod graph_capture_to;
mod graph_collective;
mod graph_footprint;
mod graph_identity;
mod graph_memory;
mod graph_pageable;
mod graphs;
mod host_flag;
mod host_memory;
mod hostfn;
mod kernel_checks;
mod kernels;
mod link;
mod memory;
mod multi;
mod multi_free;
mod params;
mod resources;
mod streams;
mod support;

/// The body of one test: `module::name` borrows the device, `module::name [owned]` owns it.
macro_rules! test_fn {
    ($m:ident :: $n:ident) => {
        $crate::support::Test::Shared($crate::$m::$n)
    };
    ($m:ident :: $n:ident, owned) => {
        $crate::support::Test::Owned($crate::$m::$n)
    };
    ($m:ident :: $n:ident, pair) => {
        $crate::support::Test::Pair($crate::$m::$n)
    };
}

/// Instantiate each `module::test` once per backend.
macro_rules! conformance {
    ($($module:ident :: $name:ident $([$flag:ident])?,)*) => {
        /// Every conformance test, by name.
        const ALL_TESTS: &[&str] = &[$(stringify!($name)),*];

        mod host {
            $(
                #[test]
                fn $name() {
                    $crate::support::run("host", stringify!($name), test_fn!($module::$name $(, $flag)?))
                }
            )*
        }

        mod cuda {
            $(
                #[test]
                fn $name() {
                    $crate::support::run("cuda", stringify!($name), test_fn!($module::$name $(, $flag)?))
                }
            )*
        }
    };
}

conformance! {
    // automatic graphs
    autograph::ag1_mode_per_stream_and_per_device,
    autograph::ag2_repeated_window_replays_as_one_graph,
    autograph::ag3_timing_events_in_a_replay_measure_the_work_between,
    autograph::ag2_a_changed_window_runs_one_by_one,
    autograph_parts::ag2_a_long_window_runs_in_parts,
    autograph_parts::ag3_parts_of_a_window_over_several_streams_keep_its_order,
    autograph_parts::ag2_a_window_over_unjoined_streams_replays_whole,
    autograph_parts::ag2_a_device_whose_windows_do_not_repeat_turns_cold,
    autograph_parts::ag2_threads_on_a_cold_device_keep_their_results,
    autograph_parts::ag2_alternating_windows_share_launch_batches,
    autograph_parts::ag2_a_changed_split_is_another_call,
    autograph_events::ag2_windows_with_new_events_replay,
    autograph_events::ag2_a_wait_for_another_record_is_another_window,
    autograph_events::ag6_replaced_events_are_let_go,
    autograph_events::ag3_a_join_waited_outside_the_window_orders,
    autograph_memory::ag2_windows_with_temporaries_replay,
    autograph_memory::ag3_a_replay_writes_the_windows_own_allocation,
    autograph_memory::ag3_a_temporary_shared_by_streams_replays_in_order,
    autograph_memory::ag2_a_temporary_kept_into_the_next_window_is_ordinary_memory,
    autograph_memory::ag6_a_replays_freed_memory_serves_the_next_window,
    autograph_memory::ag6_freed_memory_with_a_handle_left_is_not_handed_out,
    autograph_memory::ag6_freed_memory_serves_a_signature_that_begins_as_another,
    autograph_memory::ag5_memory_taken_back_is_new_to_the_sanitizer,
    autograph_memory::ag2_long_windows_with_a_temporary_run_in_parts,
    autograph::ag3_changed_scalars_are_updated_in_place,
    autograph::ag3_a_memsets_changed_byte_is_updated_in_place,
    autograph::ag3_streams_joined_by_events_replay_in_order,
    autograph::ag3_replays_fork_only_streams_with_new_work,
    autograph::ag3_a_joined_stream_waits_for_the_launch_when_used,
    autograph::ag3_a_replayed_event_completes_after_the_work_it_marks,
    autograph::ag4_observations_issue_held_work,
    autograph::ag5_sanitizer_and_traces_see_each_call,
    autograph::ag5_sanitized_windows_replay,
    autograph::ag5_windows_replay_with_the_sanitizer_on,
    autograph::ag6_signatures_hold_no_memory,
    // streams
    streams::st1_order,
    streams::st1_order_across_engines,
    streams::st1_no_overlap_within_stream,
    streams::st2_concurrency,
    streams::st2_no_order_between_streams,
    streams::st3_asynchrony,
    streams::st4_legacy_k1_k2_k3,
    streams::st4_legacy_waits_for_all_blocking_streams,
    streams::st4_blocking_streams_wait_for_legacy,
    streams::st5_non_blocking_ignores_legacy,
    streams::st5_legacy_and_non_blocking_run_concurrently,
    streams::st6_one_stream_per_thread,
    streams::st6_per_thread_does_not_sync_with_other_streams,
    streams::st6_per_thread_takes_part_in_st4,
    streams::st7_priority_range_clamped,
    streams::st7_priority_picks_ready_work,
    streams::st7_priority_does_not_preempt,
    streams::st7_priority_keeps_stream_order,
    streams::st8_query,
    streams::st8_executing_work_is_not_done,
    streams::st8_query_after_a_synchronous_read_says_done,
    streams::st9_stream_synchronize,
    streams::st9_stream_synchronize_is_per_stream,
    streams::st9_device_synchronize,
    streams::st10_drop_stream_with_pending_work,
    streams::st10_drop_stream_and_buffer,
    // events
    events::ev1_record_captures_earlier_work,
    events::ev1_record_on_idle_stream,
    events::ev2_rerecord_replaces,
    events::ev2_earlier_wait_keeps_old_capture,
    events::ev2_rerecord_does_not_reach_back,
    events::ev3_never_recorded,
    events::ev3_wait_on_never_recorded_then_recorded,
    events::ev4_stream_wait,
    events::ev4_stream_wait_across_stream_kinds,
    events::ev4_joins_reuse_events_and_keep_their_waits,
    events::ev5_query_and_synchronize,
    events::ev5_a_completed_event_is_asked_about_once,
    events::ev6_elapsed,
    events::ev6_sub_microsecond_resolution,
    events::ev6_elapsed_not_ready,
    events::ev6_elapsed_never_recorded,
    events::ev6_elapsed_timing_disabled,
    events::ev7_timing_off_still_synchronizes,
    events::ev7_blocking_sync_sleeps,
    events::ev7_interprocess_needs_timing_off,
    events::ev8_drop_pending_event,
    // copies
    copies::cp1_copy_kinds_in_stream_order,
    copies::cp1_memset_bytes,
    copies::cp1_subrange_copies,
    copies::cp1_copies_on_other_streams_unordered,
    copies::cp2_pinned_copies_are_async,
    copies::cp3_pageable_upload_stages_source,
    copies::cp3_pageable_download_waits_for_data,
    copies::cp3_device_buffer_from_slice_and_to_vec,
    copies::cp4_bounds_refused,
    copies::cp5_engines_overlap,
    copies::cp5_same_direction_shares_engine,
    // memory
    memory::mm1_alloc_used_in_stream_order,
    memory::mm1_other_stream_after_event_wait,
    memory::mm1_alloc_free_churn_without_sync,
    memory::mm1_free_waits_for_earlier_work,
    memory::mm2_dropped_buffers_outlive_work,
    memory::mm2_free_while_other_stream_uses,
    memory::mm3_host_read_waits_for_device_write,
    memory::mm3_host_write_waits_for_device_read,
    memory::mm3_host_read_waits_only_for_conflicts,
    memory::mm3_raw_access_does_not_wait,
    // kernels
    kernels::kn1_launch,
    kernels::kn1_bad_shape_refused,
    kernels::kn1_saxpy_refuses_partly_overlapping_views,
    kernels::kn2_fault_is_sticky,
    kernels::kn2_fault_names_the_kernel,
    // hostfn
    hostfn::hf1_runs_after_earlier_work,
    hostfn::hf1_later_work_waits_for_host_fn,
    hostfn::hf1_stream_order,
    hostfn::hf1_no_order_between_streams,
    hostfn::hf2_runtime_calls_refused,
    hostfn::hf3_runs_once_and_consumes,
    hostfn::hf3_views_of_declared_buffers,
    hostfn::hf3_accesses_are_tracked,
    hostfn::hf3_panic_is_a_host_function_fault,
    hostfn::hf4_callback_runs_once_with_success,
    hostfn::hf4_callback_is_told_the_sticky_error,
    // capture
    capture::gr1_capture_records_instead_of_running,
    capture::gr1_joined_streams_are_captured,
    capture::gr1_not_on_legacy_stream,
    capture::gr1_end_on_origin_stream,
    capture::gr1_unjoined_work_refused,
    capture::gr1_begin_twice_refused,
    capture::gr2_stream_synchronize,
    capture::gr2_stream_query,
    capture::gr2_event_query,
    capture::gr2_event_synchronize,
    capture::gr2_device_synchronize,
    capture::gr2_sync_copy_on_capturing_stream,
    capture::gr2_sync_calls_elsewhere,
    capture::gr2_mode_global_other_thread,
    capture::gr2_mode_thread_local_other_thread,
    capture::gr2_mode_relaxed,
    capture::gr3_replay_in_stream_order,
    capture::gr3_replay_keeps_dependencies,
    capture::gr3_graph_branches_run_concurrently,
    capture::gr4_graph_keeps_buffers_alive,
    capture::gr4_a_graph_dropped_while_its_launch_is_pending_runs_whole,
    capture::gr4_dropping_a_graph_costs_the_drop_not_a_later_call,
    capture::gr4_a_graph_dropped_inside_a_host_function,
    graphs::gr3_every_node_kind_replays,
    graphs::gr3_launches_of_one_graph_are_ordered,
    graphs::gr3_upload_runs_no_node,
    graphs::gr3_alternating_graphs_run_in_order,
    graphs::gr5_legacy_work_refused_during_capture,
    graphs::gr5_legacy_work_allowed_otherwise,
    graphs::gr6_update_in_place,
    graphs::gr6_shape_changes_refused,
    graphs::gr7_memory_nodes,
    graphs::gr7_graph_memory_is_the_graphs_own,
    graph_build::gr8_built_graph_runs_every_node_kind,
    graph_build::gr8_explicit_dependencies_order_nodes,
    graph_build::gr8_cycles_and_unknown_nodes_refused,
    graph_build::gr8_graph_memory_outside_lifetime_refused,
    graph_build::gr8_captured_and_built_combine,
    graph_build::gr8_update_built_graph,
    graph_build::gr8_event_nodes,
    graph_build::gr8_event_record_node_captures_only_its_dependencies,
    graph_build::gr8_event_wait_node_holds_only_its_dependents,
    graph_build::gr8_automatic_ordering_follows_event_nodes,
    graph_build::gr8_update_gives_event_nodes_other_events,
    graph_build::gr8_dot_output,
    conditional::gr9_while_loop_and_reset,
    conditional::gr9_unordered_loops_in_one_graph,
    conditional::gr9_loops_beside_kernels_on_host_memory,
    conditional::gr9_loops_beside_kernels_on_host_memory_of_other_streams,
    conditional::gr9_loops_of_two_graphs_at_once,
    conditional::gr9_if_else_and_switch,
    conditional::gr9_one_node_per_condition,
    conditional::gr9_nested_bodies,
    conditional::gr9_sanitizer_sees_every_body,
    kernel_checks::gr9_condition_on_a_stream_launch_refused,
    graph_collective::gr11_collectives_in_graphs [pair],
    graph_memory::gr10_freed_by_a_stream_after_the_launch,
    graph_memory::gr10_relaunch_use_and_free_follow_the_lifetime,
    graph_memory::gr10_freed_by_another_graphs_free_node,
    graph_memory::gr10_unordered_use_is_a_race,
    graph_memory::gr10_pageable_copies_and_read_value_of_handed_out_memory,
    graph_memory::gr7_one_instantiation_of_a_graph_with_memory_nodes,
    graph_identity::gr8_node_of_another_graph_refused,
    graph_identity::gr9_condition_of_another_graph_refused,
    graph_identity::gr9_each_instantiation_has_its_own_conditions,
    graph_identity::gr9_conditions_without_reset_start_at_0,
    graph_pageable::gr8_pageable_memory_in_built_graph_copies,
    graph_pageable::gr1_pageable_memory_in_captured_copies,
    graph_capture_to::gr1_capture_into_an_existing_graph,
    graph_capture_to::gr9_capture_into_a_conditional_body,
    graph_memory::gr10_dropping_the_buffer_frees_the_memory,
    graph_memory::gr10_fixed_address_and_synchronous_free,
    graph_memory::gr10_reinstantiation_waits_for_the_memory_to_be_freed,
    graph_footprint::gr12_graph_memory_is_reported_marked_and_trimmed,
    graph_footprint::gr12_trim_keeps_memory_a_graph_handed_out,
    // errors
    errors::er1_not_ready_is_not_an_error,
    errors::er2_sticky_error_everywhere,
    errors::er2_new_device_recovers [owned],
    errors::er3_foreign_handles_refused,
    errors::er3_bad_sizes_refused,
    // accesses, races, automatic ordering
    access::ac1_accesses_are_byte_ranges,
    access::ac2_happens_before_edges,
    access::ac3_what_races,
    access::ac4_error_mode_refuses_the_racing_call,
    access::ac5_automatic_ordering,
    access::ac6_conflicts_run_in_enqueue_order,
    kernel_checks::ac7_a_write_through_a_read_argument_is_reported,
    // several devices
    multi::md1_devices_are_separate [pair],
    multi::md1_fault_stays_on_its_device [pair],
    multi::md2_wait_on_another_devices_event [pair],
    multi::md2_foreign_buffers_only_in_peer_copies [pair],
    multi_free::md2_another_devices_stream_frees_in_its_order [pair],
    multi_free::md2_an_unordered_free_on_another_devices_stream_is_reported [pair],
    multi_free::md2_created_pool_memory_freed_on_another_devices_stream [pair],
    multi::md1_releasing_another_devices_memory_leaves_this_devices_calls_working [pair],
    multi::hm1_unregister_waits_for_and_lets_go_of_another_devices_work [pair],
    multi::md3_peer_copy_in_stream_order [pair],
    multi::md3_peer_copy_bounds [pair],
    multi::md3_captured_peer_copies_run_in_the_graph [pair],
    multi::md3_updated_peer_copy_nodes_copy_the_new_buffers [pair],
    multi::md3_an_update_that_moves_a_copy_to_another_device_is_whole_or_refused [pair],
    multi::md3_a_copy_within_another_devices_memory_runs_on_this_devices_stream [pair],
    multi::md4_every_collective [pair],
    multi::md4_in_place_and_floats [pair],
    multi::md4_collectives_are_stream_operations [pair],
    multi::md4_mismatches_refused [pair],
    multi::md4_collectives_are_tracked [pair],
    multi::md4_four_ranks [pair],
    // devices
    devices::dv1_properties_as_cuda_reports_them,
    devices::dv1_mem_info_sees_allocations,
    resources::rl1_a_full_queue_makes_an_enqueue_wait,
    resources::rl4_a_completion_resolves_in_its_own_order,
    devices::dv2_blocking_sync_sleeps,
    devices::dv2_flags_fixed_after_first_work,
    devices::dv3_errors_name_device_and_stream,
    driver_floor::dv4_features_follow_the_driver,
    // kernel compilation
    compile::kc1_options_and_toolkit_headers,
    compile::kc1_compile_errors_carry_the_log,
    compile::kc1_bad_options_refused,
    compile::kc1_templated_kernel_by_name_expression,
    kernel_checks::kc1_cpp_kernel_by_its_plain_name,
    compile::kc2_prepare_ahead_of_time,
    compile::kc3_cache_across_processes,
    link::kc1_relocatable_units_link,
    link::kc1_unresolved_symbol_is_a_link_error,
    link::kc4_single_block_kernel_owns_its_buffer,
    params::kc4_structs_by_value,
    params::kc4_several_arguments_over_one_buffer,
    // host memory, pools, peer kernels
    host_memory::hm1_registered_copies_are_async,
    host_memory::hm1_unregister_waits_for_pending_work,
    host_memory::hm1_overlapping_registration_refused,
    host_memory::hm1_graph_keeps_the_registration,
    host_memory::hm1_a_waited_graph_lets_go_of_its_registration,
    host_memory::hm1_unregister_orders_no_other_work,
    host_memory::hm1_a_registration_ended_by_retired_work_waits_for_no_other_work,
    host_memory::hm1_bytes_whose_registration_is_ending_register_on_another_backend,
    host_memory::hm4_freeing_managed_memory_holds_up_no_other_call,
    host_memory::hm2_portable_memory_on_every_device [pair],
    host_memory::hm3_kernels_use_mapped_memory_in_place,
    host_memory::hm3_host_access_waits_for_mapped_kernels,
    host_memory::hm3_portable_mapped_memory_across_devices [pair],
    host_memory::hm4_managed_memory_on_host_and_device,
    host_memory::hm4_legacy_stream_copies_follow_blocking_streams_kernels,
    host_memory::hm4_managed_memory_on_every_device [pair],
    host_memory::hm5_default_pool_attributes_and_statistics,
    host_memory::hm5_explicit_pool_threshold_and_trim,
    host_memory::hm6_kernels_on_peer_memory [pair],
    host_flag::hm7_the_host_releases_a_kernel_that_waits_for_it,
    host_flag::hm7_a_kernel_and_the_host_take_turns_on_one_flag,
    host_flag::hm7_flag_accesses_are_no_race_and_outlive_the_handle,
    // host-backend kernels
    kernel_checks::hk4_a_kernel_past_the_time_limit_is_a_sticky_fault,
}

/// The rule ids of the specification, lower-case (`st1`, `gr10`), parsed from its
/// `- **ID Title.**` bullets: a rule added there needs a test here (or in [`ELSEWHERE`]).
fn rules() -> Vec<String> {
    // The crate's `docs/spec.md` links to the repository's, and is what the package ships.
    include_str!("../../docs/spec.md")
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("- **"))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_ascii_lowercase)
        .collect()
}

/// Rules whose tests live outside this suite (they need a compiler, a child process or a long
/// run), with the test file that covers them (relative to the crate) and must cite them.
const ELSEWHERE: &[(&str, &str)] = &[
    ("hk1", "tests/cuda_c/builtins.rs"),
    ("hk2", "tests/cuda_c/builtins.rs"),
    ("hk3", "tests/cuda_c/builtins.rs"),
    ("rl2", "tests/soak.rs"),
    ("rl3", "tests/reliability/pool.rs"),
    ("rl5", "tests/reliability/faults.rs"),
    ("rl6", "tests/reliability/waiting_calls.rs"),
    ("md5", "tests/launchers.rs"),
];

#[test]
fn the_rules_come_from_the_specification() {
    let rules = rules();
    assert!(
        rules.len() > 70,
        "rules parsed from docs/spec.md: {rules:?}"
    );
    for r in &rules {
        let b = r.as_bytes();
        assert!(
            b.len() > 2
                && b[..2].iter().all(u8::is_ascii_lowercase)
                && b[2..].iter().all(u8::is_ascii_digit),
            "`{r}` is not a rule id: a bullet of docs/spec.md opens with `- **` but no rule"
        );
    }
    for (rule, file) in ELSEWHERE {
        assert!(
            rules.iter().any(|r| r == rule),
            "{rule} is no rule of docs/spec.md"
        );
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(
            text.contains(&rule.to_ascii_uppercase()),
            "{file} is said to test {rule} but does not cite it"
        );
    }
}

/// Run this test binary again with `args` and `env` (and no `CUEFLOW_DEVICE`): whether it
/// succeeded, and its standard output and error together.
fn run_this_binary(args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(args)
        .envs(env.iter().copied())
        .env_remove("CUEFLOW_DEVICE")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// CP5 on the host backend with one copy engine and with two, whichever this machine's cores
/// give by default: `host::cp5_engines_overlap` in a child process with
/// `CUEFLOW_HOST_COPY_ENGINES` set to each.
#[test]
fn cp5_host_with_one_and_two_copy_engines() {
    for engines in ["1", "2"] {
        let (ok, text) = run_this_binary(
            &[
                "host::cp5_engines_overlap",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ],
            &[("CUEFLOW_HOST_COPY_ENGINES", engines)],
        );
        assert!(
            ok && text.contains("1 passed"),
            "CP5 with {engines} copy engine(s) failed:\n{text}"
        );
        assert!(
            text.contains(&format!("CP5 with {engines} copy engine(s)")),
            "the child did not have {engines} copy engine(s):\n{text}"
        );
    }
}

/// Set in the child process of [`downloads_follow_their_writers`].
const SANITIZED_CHILD: &str = "CUEFLOW_CONFORMANCE_SANITIZED";

/// `support::download` reads through a fresh stream that orders with nothing: a test that
/// downloads what another stream may still be writing reads old data on a busy GPU (kc1, kc2,
/// hm1 and hm5 did, with six processes sharing one H100), while on an idle one the writer has
/// usually finished first. The host tests run again in a child process with the sanitizer on
/// find every such read whatever the timing (on the host backend the download waits and the
/// sanitizer reports the race): none may be left. (The automatic-graph tests are left out of
/// the child: they expect the sanitizer off.)
#[test]
fn downloads_follow_their_writers() {
    if std::env::var_os(SANITIZED_CHILD).is_some() {
        return;
    }
    let (_, text) = run_this_binary(
        &[
            "host::",
            "--nocapture",
            "--test-threads=2",
            "--skip",
            "host::ag",
        ],
        &[(SANITIZED_CHILD, "1"), ("CUEFLOW_SANITIZE", "warn")],
    );
    assert!(
        text.contains("test result:"),
        "the child did not run:\n{text}"
    );
    let lines: Vec<&str> = text.lines().map(str::trim_start).collect();
    let racing: Vec<String> = lines
        .windows(2)
        .filter(|w| {
            w[0].starts_with("earlier:")
                && w[1].starts_with("later:")
                && w[1].contains("read_pageable")
                && w[1].contains("conformance/support.rs:")
        })
        .map(|w| w[0].to_string())
        .collect();
    assert!(
        racing.is_empty(),
        "downloads racing their writers (synchronize the writer's stream before `download`):\n{}",
        racing.join("\n")
    );
}

#[test]
fn every_rule_has_a_test() {
    let rules = rules();
    let missing: Vec<_> = rules
        .iter()
        .filter(|r| !ALL_TESTS.iter().any(|t| t.starts_with(&format!("{r}_"))))
        .filter(|r| !ELSEWHERE.iter().any(|(e, _)| e == r))
        .collect();
    assert!(
        missing.is_empty(),
        "rules without a conformance test: {missing:?}"
    );
    for t in ALL_TESTS {
        assert!(
            rules.iter().any(|r| t.starts_with(&format!("{r}_"))),
            "test {t} does not start with a rule id"
        );
    }
    for test in support::POISONING {
        assert!(
            ALL_TESTS.contains(test),
            "poisoning list names unknown test {test}"
        );
    }
    for (backend, test, _, why) in support::EXPECTED_FAILURES {
        assert!(
            ALL_TESTS.contains(test),
            "expected failure for unknown test {test}"
        );
        assert!(
            ["host", "cuda"].contains(backend),
            "unknown backend {backend}"
        );
        assert!(
            !why.is_empty(),
            "expected failure {backend}::{test} needs a reason"
        );
    }
}
