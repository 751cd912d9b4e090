//! Unit tests of the performance model.
use super::*;

const T: f64 = 30e6; // 30 ms

fn balanced() -> ModelParams {
    ModelParams::new(StageTimes::balanced(T))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * b.abs().max(1.0)
}

#[test]
fn serial_is_sum_of_stages() {
    let mut p = ModelParams::new(StageTimes {
        h2d_ns: 10e6,
        kernel_ns: 25e6,
        d2h_ns: 7e6,
    });
    assert!(close(predict_serial(&p), 42e6));
    assert!(close(predict_concurrent(&p, 1, 1), 42e6));
    assert!(close(predict_closed_form(&p, 1), 42e6));
    p.per_op_overhead_ns = 1e3;
    assert!(close(predict_serial(&p), 42e6 + 3e3));
    assert!(close(predict_concurrent(&p, 1, 1), predict_serial(&p)));
    assert!(close(predict_closed_form(&p, 1), predict_serial(&p)));
}

#[test]
fn one_stream_never_overlaps() {
    let p = balanced();
    assert!(close(predict_concurrent(&p, 1, 8), 3.0 * T));
}

#[test]
fn four_streams_four_chunks_take_half_the_serial_time() {
    let p = balanced();
    let conc = predict_concurrent(&p, 4, 4);
    assert!(close(conc, 1.5 * T), "{conc}");
    assert!(close(conc / predict_serial(&p), 0.5));
    assert!(close(predict_closed_form(&p, 4), 1.5 * T));
}

#[test]
fn more_chunks_approach_the_largest_stage() {
    let p = balanced();
    let mut prev = f64::INFINITY;
    for chunks in [4, 16, 64, 256] {
        let t = predict_concurrent(&p, 4, chunks);
        assert!(t < prev);
        assert!(close(t, predict_closed_form(&p, chunks)), "{chunks}: {t}");
        prev = t;
    }
    assert!(prev < 1.01 * T);
}

#[test]
fn unbalanced_matches_closed_form_and_bottleneck() {
    let p = ModelParams {
        per_op_overhead_ns: 5e3,
        ..ModelParams::new(StageTimes {
            h2d_ns: 20e6,
            kernel_ns: 50e6,
            d2h_ns: 10e6,
        })
    };
    for chunks in [1, 2, 8, 32] {
        let sim = predict_concurrent(&p, 4, chunks);
        assert!(
            close(sim, predict_closed_form(&p, chunks)),
            "{chunks}: {sim}"
        );
        assert!(sim >= 50e6);
    }
}

#[test]
fn overhead_gives_an_interior_optimum() {
    let p = ModelParams {
        per_op_overhead_ns: 50e3, // 50 µs per op
        ..balanced()
    };
    let few = predict_concurrent(&p, 4, 4);
    let many = predict_concurrent(&p, 4, 4096);
    let c = choose(&p, 8, 4096);
    assert!(c.chunks > 4 && c.chunks < 4096, "{c:?}");
    assert!(c.predicted_ns < few && c.predicted_ns < many, "{c:?}");
    assert!(many > predict_concurrent(&p, 4, 256));
    assert_eq!(c.chunks % c.streams, 0);
    assert!(close(
        c.predicted_ns,
        predict_concurrent(&p, c.streams, c.chunks)
    ));
}

#[test]
fn choose_prefers_fewer_ops_when_close() {
    // No overhead: more chunks always help a little; the 1% rule stops the search early.
    let p = balanced();
    let c = choose(&p, 8, 1 << 12);
    let best = predict_concurrent(&p, 4, 1 << 12);
    assert!(c.predicted_ns <= best * 1.01);
    assert!(c.chunks < 1 << 12, "{c:?}");
    // Serial-only search space.
    let s = choose(&p, 1, 1);
    assert_eq!((s.streams, s.chunks), (1, 1));
    assert!(close(s.predicted_ns, predict_serial(&p)));
}

#[test]
fn duplex_slowdown_hurts_the_copy_bound_case() {
    let mut p = ModelParams::new(StageTimes {
        h2d_ns: 40e6,
        kernel_ns: 5e6,
        d2h_ns: 40e6,
    });
    let base = predict_concurrent(&p, 4, 16);
    p.duplex_slowdown = 55.0 / 47.6;
    let slow = predict_concurrent(&p, 4, 16);
    assert!(slow > base * 1.05, "{base} {slow}");
    // Never slower than fully serialized copies, nor than serial at slowdown 1.
    assert!(slow < 85e6 * 55.0 / 47.6);
    // Serial never has both copies in flight.
    assert!(close(predict_concurrent(&p, 1, 1), predict_serial(&p)));
}

#[test]
fn compute_slots_let_kernels_overlap() {
    let mut p = ModelParams::new(StageTimes {
        h2d_ns: 1e6,
        kernel_ns: 40e6,
        d2h_ns: 1e6,
    });
    let one = predict_concurrent(&p, 4, 4);
    p.compute_slots = 4;
    let four = predict_concurrent(&p, 4, 4);
    assert!(four < one * 0.5, "{one} {four}");
}

#[test]
fn shared_cores_slow_the_engines_that_run_at_once() {
    let mut p = balanced();
    let own = predict_concurrent(&p, 4, 64);
    p.shared_cores = 3; // as many cores as engines: no change
    assert!(close(predict_concurrent(&p, 4, 64), own));
    p.shared_cores = 2;
    let two = predict_concurrent(&p, 4, 64);
    // Three equal stages on two cores: at best 3·T / 2, and never better than that.
    assert!(two >= 1.5 * T * (1.0 - 1e-9), "{two}");
    assert!(two < 1.6 * T, "{two}");
    // Serial runs one engine at a time: shared cores change nothing.
    assert!(close(predict_concurrent(&p, 1, 1), predict_serial(&p)));
    p.shared_cores = 1;
    assert!(predict_concurrent(&p, 4, 64) >= 3.0 * T * (1.0 - 1e-9));
}

#[test]
fn shared_cores_run_at_most_that_many_operations() {
    let p = ModelParams {
        shared_cores: 2,
        per_op_overhead_ns: 1e3,
        ..balanced()
    };
    let tr = simulate(&p, 4, 32, 1 << 20);
    let mut edges: Vec<(u64, i32)> = tr
        .ops
        .iter()
        .flat_map(|o| [(o.start_ns, 1), (o.end_ns, -1)])
        .collect();
    edges.sort(); // ends (-1) before starts (+1) at the same instant
    let mut running = 0;
    for (_, d) in edges {
        running += d;
        assert!(running <= 2);
    }
}

/// An H100 over PCIe at 1 GiB (copies about 19.5 ms each way, the kernel about as long,
/// tens of microseconds per operation as the probe fits them, duplex 55/47.6): `auto` chose 4 × 32 there, the
/// sweep's best. A GPU's per-chunk costs scale linearly with the chunk, so costs measured
/// at each chunk size give every chunk count the same parameters, and `choose_by` chooses
/// exactly what `choose` does.
#[test]
fn per_chunk_size_parameters_leave_a_linear_gpu_alone() {
    let p = ModelParams {
        per_op_overhead_ns: 20e3,
        duplex_slowdown: 55.0 / 47.6,
        ..ModelParams::new(StageTimes {
            h2d_ns: 19.5e6,
            kernel_ns: 21.6e6,
            d2h_ns: 19.5e6,
        })
    };
    let c = choose(&p, 16, 128);
    assert_eq!((c.streams, c.chunks), (4, 32), "{c:?}");
    assert_eq!(choose_by(|_| p, 16, 128), c);
    // Linear per-chunk costs, as a probe at each chunk size measures them (whole-buffer
    // stage time = chunks × per-chunk time, up to rounding): the same choice.
    let at = |n: u32| {
        let per_chunk = |t: f64| (t / f64::from(n) * 1e3).round() / 1e3;
        ModelParams {
            stages: StageTimes {
                h2d_ns: per_chunk(p.stages.h2d_ns) * f64::from(n),
                kernel_ns: per_chunk(p.stages.kernel_ns) * f64::from(n),
                d2h_ns: per_chunk(p.stages.d2h_ns) * f64::from(n),
            },
            ..p
        }
    };
    let sized = choose_by(at, 16, 128);
    assert_eq!((sized.streams, sized.chunks), (4, 32), "{sized:?}");
}

#[test]
fn cheaper_small_chunks_move_the_choice() {
    // Chunks of up to 1/32 of the buffer run a third faster per byte (they stay in the
    // caches): with shared cores, the model now goes where that pays.
    let p = ModelParams {
        per_op_overhead_ns: 20e3,
        shared_cores: 2,
        ..balanced()
    };
    let whole = choose(&p, 16, 128);
    let at = |n: u32| {
        let f = if n >= 32 { 2.0 / 3.0 } else { 1.0 };
        ModelParams {
            stages: StageTimes {
                kernel_ns: T * f,
                d2h_ns: T * f,
                ..p.stages
            },
            ..p
        }
    };
    let sized = choose_by(at, 16, 128);
    assert!(sized.chunks >= 32, "{whole:?} {sized:?}");
    assert!(sized.predicted_ns < whole.predicted_ns);
}

#[test]
fn simulated_trace_is_consistent() {
    let p = balanced();
    let tr = simulate(&p, 4, 8, 8 << 20);
    assert_eq!(tr.ops.len(), 24);
    assert_eq!(tr.streams.len(), 4);
    assert_eq!(tr.streams[0], (1, "stream 1".to_string()));
    let copied: u64 = tr
        .ops
        .iter()
        .filter(|o| o.kind == OpKind::CopyH2D)
        .map(|o| o.bytes)
        .sum();
    assert_eq!(copied, 8 << 20);
    let (lo, hi) = tr.span_ns().unwrap();
    assert_eq!(lo, 0);
    assert_eq!(hi, predict_concurrent(&p, 4, 8).round() as u64);
    // Engines never run two ops at once (one compute slot).
    for engine in [Engine::CopyH2D, Engine::Compute, Engine::CopyD2H] {
        let mut v: Vec<_> = tr.ops.iter().filter(|o| o.engine == engine).collect();
        v.sort_by_key(|o| o.start_ns);
        for w in v.windows(2) {
            assert!(w[0].end_ns <= w[1].start_ns);
        }
    }
    // Streams are FIFO.
    for s in 1..=4 {
        let v: Vec<_> = tr.ops.iter().filter(|o| o.stream == s).collect();
        for w in v.windows(2) {
            assert!(w[0].end_ns <= w[1].start_ns);
        }
    }
}

#[test]
fn degenerate_inputs_do_not_hang() {
    let p = ModelParams::default();
    assert_eq!(predict_concurrent(&p, 0, 0), 0.0);
    let tr = simulate(&p, 0, 0, 0);
    assert_eq!(tr.ops.len(), 3);
    let q = ModelParams {
        duplex_slowdown: f64::NAN,
        per_op_overhead_ns: -1.0,
        ..balanced()
    };
    assert!(close(predict_concurrent(&q, 4, 4), 1.5 * T));
}
