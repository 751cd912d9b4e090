//! loom models of the host scheduler's lock-free protocols (`scripts/loom.sh`; compiled only
//! under `cfg(loom)`, where `sync.rs` hands sched_node.rs and graph.rs loom's atomics and mutex).
//!
//! The models call the real code: `SchedNode::{new, depend_on, release_one, take_work, mark_done,
//! is_done}` and `GraphRun::{new, release, finish_one}`. What they cannot call is `Scheduler`
//! itself (it starts engine threads and sleeps with timeouts), so each model drives those
//! functions in the order `sched.rs` does, in small drivers below that name the lines they
//! follow; the drivers add no synchronization of their own (their bookkeeping only records what
//! ran, for the assertions after the threads joined).
//!
//! | model                               | rules          | the race                                   |
//! |-------------------------------------|----------------|--------------------------------------------|
//! | `completion_races_registration`     | node 1, 2      | a dependency completes while linked to     |
//! | `two_completions_race_registration` | node 1, 2      | both dependencies complete while linked to |
//! | `cascade_races_registration`        | node 1, 2      | a marker completed by a cascade, linked to |
//! | `graph_join_is_ready_once`          | graph counters | two graph nodes complete into one join     |
//! | `gate_holds_a_graph_node_until_its_work_completed` | graph rule 4 | a gate's work completes as the run starts |
//! | `waiter_is_woken`                   | node 3         | a host wait against the completion         |
//!
//! Each asserts, over every interleaving loom explores: every node is completed once all
//! threads joined (no lost wake-up), and no node is dispatched twice.

use std::collections::HashMap;
use std::sync::Arc;

use loom::sync::atomic::fence;
use loom::thread;

use super::graph::{CNode, Compiled, GraphJob, GraphRun};
use super::sched_node::{SchedNode, SchedWork};
use super::sync::{AtomicUsize, Ordering};

/// What ran, by node (its `seq`): how many times its work was taken. Shared by the threads of
/// one execution; std's mutex is enough, loom runs one thread at a time.
#[derive(Clone, Default)]
struct Ran(Arc<std::sync::Mutex<HashMap<u64, usize>>>);

impl Ran {
    fn count(&self, node: &SchedNode) -> usize {
        self.0.lock().unwrap().get(&node.seq).copied().unwrap_or(0)
    }

    fn record(&self, node: &SchedNode) {
        *self.0.lock().unwrap().entry(node.seq).or_default() += 1;
    }
}

/// A marker node: what `Scheduler::begin` makes (the guard held, rule 2), without a scheduler.
fn marker(seq: u64) -> Arc<SchedNode> {
    SchedNode::new(
        std::sync::Weak::<super::sched::Scheduler>::new(),
        seq,
        0,
        SchedWork::Marker,
        None,
    )
}

/// `Scheduler::ready` for a node whose count reached zero: take its work exactly once (a second
/// `take_work` finding none is the double dispatch rule 2 forbids), then, as for every marker,
/// complete it on the spot.
fn ready(node: Arc<SchedNode>, ran: &Ran) {
    match node.take_work() {
        Some(SchedWork::Marker) => ran.record(&node),
        Some(_) => unreachable!("the models make markers only"),
        None => panic!("node {} dispatched twice", node.seq),
    }
    complete(node, ran);
}

/// `Scheduler::complete`: mark `node` done, release its dependents, and complete at once the
/// markers that became ready (the scheduler's stack), as sched.rs does.
fn complete(node: Arc<SchedNode>, ran: &Ran) {
    let mut stack = vec![node];
    while let Some(n) = stack.pop() {
        for d in n.mark_done(1) {
            if d.release_one() {
                match d.take_work() {
                    Some(SchedWork::Marker) => {
                        ran.record(&d);
                        stack.push(d);
                    }
                    Some(_) => unreachable!("the models make markers only"),
                    None => panic!("node {} dispatched twice", d.seq),
                }
            }
        }
    }
}

/// `Scheduler::release`: drop the submitter's guard (rule 2); dispatch if that made it ready.
fn release(node: Arc<SchedNode>, ran: &Ran) {
    if node.release_one() {
        ready(node, ran);
    }
}

/// A node already dispatched (its guard dropped, its work taken), as an operation running on an
/// engine is; the model completes it.
fn running(seq: u64, ran: &Ran) -> Arc<SchedNode> {
    let n = marker(seq);
    assert!(n.release_one());
    assert!(n.take_work().is_some());
    ran.record(&n);
    n
}

fn check_all_ran_once(ran: &Ran, nodes: &[&Arc<SchedNode>]) {
    for n in nodes {
        assert!(n.is_done(), "node {} never completed (lost wake-up)", n.seq);
        assert_eq!(ran.count(n), 1, "node {}", n.seq);
    }
}

/// Explore every interleaving of `f` (up to `LOOM_MAX_PREEMPTIONS` and the other LOOM_*
/// variables, which the builder reads); prints how many executions that took.
fn model(f: impl Fn() + Sync + Send + 'static) {
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = runs.clone();
    loom::model::Builder::new().check(move || {
        counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        f()
    });
    eprintln!(
        "loom: {} executions",
        runs.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// Rules 1 and 2: a node is linked to a dependency (`Stream` submitting the next operation)
/// while an engine completes that dependency. Whether the link sees `done` or the completer
/// sees the dependent, the new node runs exactly once.
#[test]
fn completion_races_registration() {
    model(|| {
        let ran = Ran::default();
        let a = running(0, &ran);
        let engine = {
            let (a, ran) = (a.clone(), ran.clone());
            thread::spawn(move || complete(a, &ran))
        };
        let b = marker(1);
        b.depend_on(&a);
        release(b.clone(), &ran);
        engine.join().unwrap();
        check_all_ran_once(&ran, &[&a, &b]);
    });
}

/// Rules 1 and 2 with two dependencies (a stream predecessor and an awaited event) completing
/// on two engines while the submitter links to both and then drops its guard.
#[test]
fn two_completions_race_registration() {
    model(|| {
        let ran = Ran::default();
        let a1 = running(0, &ran);
        let a2 = running(1, &ran);
        let engines: Vec<_> = [&a1, &a2]
            .into_iter()
            .map(|a| {
                let (a, ran) = (a.clone(), ran.clone());
                thread::spawn(move || complete(a, &ran))
            })
            .collect();
        let b = marker(2);
        b.depend_on(&a1);
        b.depend_on(&a2);
        release(b.clone(), &ran);
        for e in engines {
            e.join().unwrap();
        }
        check_all_ran_once(&ran, &[&a1, &a2, &b]);
    });
}

/// Rules 1 and 2 through a cascade: `b` (an event record, a marker) waits for `a`; completing
/// `a` completes `b` on the spot, on the engine's thread, while the submitter links `c` to `b`.
#[test]
fn cascade_races_registration() {
    model(|| {
        let ran = Ran::default();
        let a = running(0, &ran);
        let b = marker(1);
        b.depend_on(&a);
        release(b.clone(), &ran); // `a` runs: `b` keeps one count.
        let engine = {
            let (a, ran) = (a.clone(), ran.clone());
            thread::spawn(move || complete(a, &ran))
        };
        let c = marker(2);
        c.depend_on(&b);
        release(c.clone(), &ran);
        engine.join().unwrap();
        check_all_ran_once(&ran, &[&a, &b, &c]);
    });
}

/// The ready counters of a graph run: two roots complete on two workers into one join node
/// (`Scheduler::graph_node_done`: `run.release(d)` per dependent, then `run.finish_one()`).
/// The join is made ready by exactly one of them, the run finishes exactly once and only after
/// all three nodes, and then completes the launch's stream node (graph rule 2).
#[test]
fn graph_join_is_ready_once() {
    model(|| {
        let ran = Ran::default();
        let nodes = vec![cnode(0, vec![2]), cnode(0, vec![2]), cnode(2, Vec::new())];
        let launch = running(9, &ran);
        let job = job(nodes, vec![0, 1]);
        let run = GraphRun::new(launch.clone(), job);
        let joins = Arc::new(AtomicUsize::new(0));
        let finished = Arc::new(AtomicUsize::new(0));
        let node_done = {
            let (joins, finished) = (joins.clone(), finished.clone());
            move |run: &Arc<GraphRun>, i: usize, ran: &Ran| {
                let mut completed = vec![i];
                while let Some(n) = completed.pop() {
                    for &d in &run.job.compiled.nodes[n].dependents {
                        if run.release(d) {
                            joins.fetch_add(1, Ordering::Relaxed);
                            completed.push(d);
                        }
                    }
                    if run.finish_one() {
                        finished.fetch_add(1, Ordering::Relaxed);
                        // `graph_finished`: the stream node completes after the last node.
                        assert_eq!(joins.load(Ordering::Relaxed), 1);
                        complete(run.node.clone(), ran);
                    }
                }
            }
        };
        let workers: Vec<_> = [0, 1]
            .into_iter()
            .map(|root| {
                let (run, ran, node_done) = (run.clone(), ran.clone(), node_done.clone());
                thread::spawn(move || node_done(&run, root, &ran))
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(joins.load(Ordering::Relaxed), 1, "join made ready once");
        assert_eq!(finished.load(Ordering::Relaxed), 1, "run finished once");
        check_all_ran_once(&ran, &[&launch]);
    });
}

fn cnode(deps: u32, dependents: Vec<usize>) -> CNode {
    CNode {
        op: None,
        deps,
        dependents,
        event: None,
    }
}

/// A launch of a graph of `nodes` with `roots`, without event nodes.
fn job(nodes: Vec<CNode>, roots: Vec<usize>) -> GraphJob {
    GraphJob {
        compiled: Arc::new(Compiled {
            nodes,
            roots,
            conds: Vec::new(),
            records: Vec::new(),
            waits: Vec::new(),
        }),
        trace: None,
        events: None,
    }
}

/// `Scheduler::ready` of a gate, then `gate_opened` (graph rule 4): complete the gate and
/// release its graph nodes; a node made ready counts as dispatched, and must find its work done.
fn open_gate(gate: Arc<SchedNode>, work_done: &SchedNode, dispatched: &AtomicUsize) {
    let Some(SchedWork::GraphGate(run, nodes)) = gate.take_work() else {
        panic!("gate {} dispatched twice, or not a gate", gate.seq);
    };
    assert!(gate.mark_done(1).is_empty(), "nothing depends on a gate");
    for i in nodes {
        if run.release(i) {
            assert!(
                work_done.is_done(),
                "graph node {i} ran before the work it waits for"
            );
            dispatched.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Graph rule 4: a wait node's gate against the completion of the work it waits for. The run
/// holds the root and links the gate (`start_graph`) while an engine completes the work: the
/// node is dispatched exactly once, by whichever of the two comes last, and never before the
/// work completed.
#[test]
fn gate_holds_a_graph_node_until_its_work_completed() {
    model(|| {
        let ran = Ran::default();
        let work = running(0, &ran);
        let launch = running(9, &ran);
        let run = GraphRun::new(launch, job(vec![cnode(0, Vec::new())], vec![0]));
        let dispatched = Arc::new(AtomicUsize::new(0));
        // `start_graph`: hold, link the gate, dispatch the unheld roots, drop the gate's guard.
        run.hold(0);
        let gate = SchedNode::new(
            std::sync::Weak::<super::sched::Scheduler>::new(),
            5,
            0,
            SchedWork::GraphGate(run.clone(), vec![0]),
            None,
        );
        gate.depend_on(&work);
        let engine = {
            let (work, dispatched) = (work.clone(), dispatched.clone());
            thread::spawn(move || {
                // `Scheduler::complete` of the work: its dependents released.
                for d in work.mark_done(1) {
                    if d.release_one() {
                        open_gate(d, &work, &dispatched);
                    }
                }
            })
        };
        if !run.held(0) {
            dispatched.fetch_add(1, Ordering::Relaxed);
        }
        if gate.release_one() {
            open_gate(gate.clone(), &work, &dispatched);
        }
        engine.join().unwrap();
        assert_eq!(dispatched.load(Ordering::Relaxed), 1, "dispatched once");
        assert!(gate.is_done());
    });
}

/// Rule 3: a host thread waits for a node (`Scheduler::wait`, after its spin) while an engine
/// completes it (`Scheduler::complete`); the waiter sleeps on the condition variable without a
/// timeout here, so a lost wake-up is a deadlock loom reports.
///
/// The scheduler's lock and condition variable are fields of `Scheduler`, which the model
/// cannot build; they are loom's here, used line for line as in sched.rs, around the real
/// `SchedNode::mark_done`, `SchedNode::want_wake`, `SchedNode::wants_wake` and
/// `SchedNode::is_done`. Rule 3 is a store→load (Dekker) protocol: each side writes its flag,
/// then reads the other's, both `SeqCst`, and C++20's total order forbids both reading the old
/// value. loom models `SeqCst` accesses as acquire/release only (loom#180), so it would report
/// that forbidden outcome; the `fence(SeqCst)` after each write tells loom what the `SeqCst`
/// accesses already guarantee and changes nothing for the real code.
#[test]
fn waiter_is_woken() {
    waiter_model(true, false);
}

/// The model has teeth: a completer that read the node's `wake` flag before setting `done`
/// (rule 3 broken) leaves the waiter asleep, and loom reports the deadlock.
#[test]
#[should_panic(expected = "deadlock")]
fn waiter_model_detects_a_lost_wake_up() {
    waiter_model(true, true);
}

/// `fences`: see [`waiter_is_woken`]; `broken`: the completer reads `wake` first.
fn waiter_model(fences: bool, broken: bool) {
    model(move || {
        let lock = Arc::new(loom::sync::Mutex::new(()));
        let cv = Arc::new(loom::sync::Condvar::new());
        let ran = Ran::default();
        let node = running(0, &ran);
        let engine = {
            let (node, lock, cv) = (node.clone(), lock.clone(), cv.clone());
            thread::spawn(move || {
                let early = broken && node.wants_wake();
                node.mark_done(1); // `complete`: the node's done (no dependents here).
                if fences {
                    fence(Ordering::SeqCst);
                }
                // SchedNode rule 3: read `wake` after `done` is set.
                let wake = if broken { early } else { node.wants_wake() };
                if wake {
                    let _g = lock.lock().unwrap();
                    cv.notify_all();
                }
            })
        };
        // `wait(node, sleep = true)`.
        if !node.is_done() {
            node.want_wake(); // SchedNode rule 3.
            if fences {
                fence(Ordering::SeqCst);
            }
            let mut g = lock.lock().unwrap();
            while !node.is_done() {
                g = cv.wait(g).unwrap();
            }
            drop(g);
        }
        engine.join().unwrap();
        assert!(node.is_done());
    });
}
