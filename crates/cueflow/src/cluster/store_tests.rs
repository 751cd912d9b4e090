use std::net::TcpListener;
use std::thread;

use super::*;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn hello(rank: usize, ranks: usize, host: &str) -> Hello {
    Hello {
        rank,
        ranks,
        backend: "host".into(),
        host: host.into(),
    }
}

const T: Duration = Duration::from_secs(5);

#[test]
fn every_rank_gets_the_id() {
    let port = free_port();
    let peers: Vec<_> = (1..4)
        .map(|r| thread::spawn(move || fetch("localhost", port, &hello(r, 4, "a"), T)))
        .collect();
    serve("localhost", port, &hello(0, 4, "a"), "host:00ff", T).unwrap();
    for p in peers {
        assert_eq!(p.join().unwrap().unwrap(), "host:00ff");
    }
}

#[test]
fn a_rank_on_another_machine_fails_every_host_rank() {
    let port = free_port();
    let near = thread::spawn(move || fetch("127.0.0.1", port, &hello(1, 3, "a"), T));
    // Rank 0 must have taken rank 1's hello before rank 2 comes, for rank 1 to hear the
    // verdict (a rank not yet connected would time out instead).
    thread::sleep(Duration::from_millis(200));
    let far = thread::spawn(move || {
        thread::sleep(Duration::from_millis(200));
        fetch("127.0.0.1", port, &hello(2, 3, "b"), T)
    });
    let e = serve("127.0.0.1", port, &hello(0, 3, "a"), "id", T).unwrap_err();
    assert!(
        matches!(&e, LaunchError::NotLocal(w) if w.contains("rank 2 runs on b")),
        "{e}"
    );
    assert_eq!(near.join().unwrap(), Err(e.clone()));
    assert_eq!(far.join().unwrap(), Err(e));
}

#[test]
fn strangers_are_ignored_and_other_versions_refused() {
    let port = free_port();
    let rank1 = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        // A health check that sends something else, then a rank.
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
        fetch("127.0.0.1", port, &hello(1, 2, "a"), T)
    });
    serve("127.0.0.1", port, &hello(0, 2, "a"), "id", T).unwrap();
    assert_eq!(rank1.join().unwrap().unwrap(), "id");

    let port = free_port();
    let old = thread::spawn(move || {
        let mut f = frame(HELLO, &[]);
        f[4] = VERSION + 1;
        let mut s = connect("127.0.0.1", port, Instant::now(), T).unwrap();
        s.write_all(&f).unwrap();
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).unwrap();
        parse(&answer).unwrap().unwrap().0
    });
    // (Rank 1 never says hello: rank 0 waits for it until its timeout, to tell it too.)
    let short = Duration::from_millis(500);
    let e = serve("127.0.0.1", port, &hello(0, 2, "a"), "id", short).unwrap_err();
    assert!(
        matches!(&e, LaunchError::Protocol(w) if w.contains("version 2")),
        "{e}"
    );
    assert_eq!(old.join().unwrap(), REFUSED);
}

#[test]
fn a_peer_not_speaking_the_protocol_is_named() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.write_all(b"SSH-2.0-OpenSSH\r\n").unwrap();
        thread::sleep(Duration::from_millis(500));
    });
    let e = fetch("127.0.0.1", port, &hello(1, 2, "a"), T).unwrap_err();
    assert!(
        matches!(&e, LaunchError::Protocol(w) if w.contains("MASTER_PORT")),
        "{e}"
    );
}

#[test]
fn errors_travel_whole() {
    let errors = [
        LaunchError::Timeout {
            ranks: 8,
            missing: vec![3, 7],
            waited: Duration::from_millis(1500),
        },
        LaunchError::WorldSizeMismatch {
            rank: 2,
            theirs: 3,
            ours: 4,
        },
        LaunchError::DuplicateRank {
            rank: 1,
            first: "a".into(),
            second: "b".into(),
        },
        LaunchError::RankOutOfRange { rank: 9, ranks: 4 },
        LaunchError::BackendMismatch {
            rank: 1,
            theirs: "cuda".into(),
            ours: "host".into(),
        },
        LaunchError::NotLocal("why".into()),
        LaunchError::Protocol("what".into()),
    ];
    for e in errors {
        assert_eq!(decode_error(&mut Dec(&encode_error(&e))), Ok(e));
    }
    let other = LaunchError::NoLauncher;
    assert_eq!(
        decode_error(&mut Dec(&encode_error(&other))),
        Ok(LaunchError::Aborted(other.to_string()))
    );
}
