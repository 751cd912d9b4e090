//! Unit tests of capture bookkeeping (rules of `core::graphs::capture`), miri included.
use super::*;
use crate::backend::contract::memory::MemRef;
use crate::backend::contract::node_op::NodeOp;
use crate::backend::contract::op::Work;

const CAPTURE: u64 = 77;

fn node(work: GraphWork, deps: &[usize]) -> GraphNode {
    GraphNode {
        work,
        deps: deps.into(),
        lane: 0,
        stream: 1,
        site: None,
    }
}

/// A memset of graph allocation `slot`.
fn uses(slot: usize, deps: &[usize]) -> GraphNode {
    let alloc = Allocation::placeholder(
        64,
        0,
        GraphSlot {
            capture: CAPTURE,
            slot,
        },
    );
    let dst = MemRef {
        alloc,
        offset: 0,
        len: 64,
    };
    node(
        GraphWork::Op(NodeOp::new(Op::new(Work::Memset { dst, value: 0 }))),
        deps,
    )
}

fn alloc(slot: usize, deps: &[usize]) -> GraphNode {
    node(GraphWork::Alloc { slot, bytes: 64 }, deps)
}

fn free(slot: usize, deps: &[usize]) -> GraphNode {
    node(GraphWork::Free { slot }, deps)
}

fn refused(nodes: &[GraphNode], slots: usize, words: &str) {
    match check_graph_memory(nodes, slots) {
        Err(Error::Capture(m)) => assert!(m.contains(words), "{m}"),
        Err(e) => panic!("{e}"),
        Ok(()) => panic!("accepted; expected a refusal that says {words:?}"),
    }
}

#[test]
fn graph_memory_is_used_between_its_alloc_and_free() {
    assert!(check_graph_memory(&[], 0).is_ok());
    // alloc → use → free, and a second slot used from a side branch joined before its free.
    let ok = [
        alloc(0, &[]),
        uses(0, &[0]),
        free(0, &[1]),
        alloc(1, &[]),
        uses(1, &[3]),
        uses(1, &[3]),
        free(1, &[4, 5]),
    ];
    assert!(check_graph_memory(&ok, 2).is_ok());
    // GR10: an allocation the capture does not free outlives the launch.
    assert!(check_graph_memory(&[alloc(0, &[]), uses(0, &[0])], 1).is_ok());
    refused(
        &[alloc(0, &[]), free(0, &[0]), free(0, &[1])],
        1,
        "freed twice",
    );
    refused(
        &[alloc(0, &[]), uses(0, &[]), free(0, &[0, 1])],
        1,
        "ordered after its allocation node",
    );
    refused(
        &[alloc(0, &[]), uses(0, &[0]), free(0, &[0])],
        1,
        "ordered before its free node",
    );
}

fn session(mode: CaptureMode, owner: ThreadId, blocking: bool) -> Arc<CaptureSession> {
    let id = NEXT_SESSION.fetch_add(1, Ordering::Relaxed);
    Arc::new(CaptureSession {
        id,
        mode,
        owner,
        origin: 1,
        origin_actor: 0,
        graph: id,
        target: None,
        active: AtomicBool::new(true),
        state: Mutex::new(State {
            lanes: vec![Lane {
                stream: Weak::new(),
                stream_id: 1,
                blocking,
                frontier: Default::default(),
            }],
            ..State::default()
        }),
    })
}

fn invalidated(s: &CaptureSession) -> Option<String> {
    s.state.lock().invalidated.clone()
}

#[test]
fn modes_decide_which_calls_invalidate() {
    let me = std::thread::current().id();
    let other = std::thread::spawn(|| std::thread::current().id())
        .join()
        .unwrap();
    let reg = CaptureRegistry::default();
    assert!(reg.check_unsafe_call("anything").is_ok(), "no capture");
    let relaxed = session(CaptureMode::Relaxed, me, true);
    let elsewhere = session(CaptureMode::ThreadLocal, other, true);
    reg.add(relaxed.clone());
    reg.add(elsewhere.clone());
    // Rule 4: neither a relaxed capture nor another thread's thread-local one counts here.
    assert!(reg.check_unsafe_call("device synchronize").is_ok());
    assert!(reg.check_legacy_work("a copy").is_ok());
    assert_eq!(invalidated(&relaxed), None);
    assert_eq!(invalidated(&elsewhere), None);
    // This thread's thread-local capture refuses and is invalidated by the first call.
    let mine = session(CaptureMode::ThreadLocal, me, false);
    reg.add(mine.clone());
    assert!(matches!(
        reg.check_unsafe_call("device synchronize"),
        Err(Error::CaptureIllegal(_))
    ));
    assert!(reg.check_unsafe_call("a synchronous copy").is_err());
    assert_eq!(invalidated(&mine).as_deref(), Some("device synchronize"));
    // Rule 6: legacy-stream work is refused only while a counted capture has a blocking
    // lane; `mine` has none.
    assert!(reg.check_legacy_work("a copy").is_ok());
    reg.remove(mine.id);
    let global = session(CaptureMode::Global, other, true);
    reg.add(global.clone());
    assert!(reg.check_legacy_work("a copy").is_err());
    assert!(invalidated(&global)
        .unwrap()
        .contains("legacy default stream"));
    reg.remove(global.id);
    reg.remove(global.id); // Twice: counted once.
    reg.remove(relaxed.id);
    reg.remove(elsewhere.id);
    assert_eq!(reg.active.load(Ordering::Acquire), 0);
    assert!(reg.check_unsafe_call("anything").is_ok());
}
