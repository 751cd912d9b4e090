//! The store through which the ranks of a launched job meet (SPEC MD5), as PyTorch's
//! `TCPStore` does: rank 0 listens at `MASTER_PORT` on every interface; every other rank
//! connects to `MASTER_ADDR:MASTER_PORT` (retrying while rank 0 is not up yet) and says who
//! it is; once every rank has, rank 0 answers each with the communicator's id. Rank 0 checks
//! what the ranks say against its own view, and a rank that disagrees — another world size, a
//! rank already taken or out of range, another backend, another machine where the backend
//! needs one — fails the whole rendezvous: rank 0 answers every connected rank with the error.
//!
//! The protocol, every message a frame:
//!
//! ```text
//! frame    = "CFST" version:u8 kind:u8 length:u32 payload[length]     (integers big-endian)
//! hello    = kind 1: rank:u64 ranks:u64 backend:str host:str           (rank → rank 0)
//! welcome  = kind 2: id:str                                            (rank 0 → rank)
//! refused  = kind 3: error                                             (rank 0 → rank)
//! str      = length:u16 bytes[length] (UTF-8)
//! ```
//!
//! A connection whose first bytes are not `CFST` is a stranger (a port scanner, a health
//! check) and is dropped; a frame of another version fails the rendezvous with a protocol
//! error naming both versions.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::error::LaunchError;

const MAGIC: &[u8; 4] = b"CFST";
const VERSION: u8 = 1;
const HEADER: usize = 10;
/// Frames are small (an id, two names); anything longer is not ours.
const MAX_PAYLOAD: usize = 1 << 16;

const HELLO: u8 = 1;
const WELCOME: u8 = 2;
const REFUSED: u8 = 3;

/// How much longer than their timeout the other ranks wait for rank 0's verdict, which
/// rank 0 sends when its own timeout (started when it started) ends.
const VERDICT_GRACE: Duration = Duration::from_secs(2);

/// What a rank tells rank 0 about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Hello {
    pub rank: usize,
    pub ranks: usize,
    /// The backend of the rank's device (`host`, `cuda`).
    pub backend: String,
    /// The rank's host name.
    pub host: String,
}

/// Rank 0: listen at `port` on every interface (IPv6 ones when `store_host` names only IPv6
/// addresses), wait until every other rank has said hello, and answer each with `id`. When a
/// rank disagrees or the timeout passes, every rank is answered with the error instead — also
/// ranks that come after it was found, until all have been told or the timeout passes — and
/// the error is returned.
pub(crate) fn serve(
    store_host: &str,
    port: u16,
    me: &Hello,
    id: &str,
    timeout: Duration,
) -> Result<(), LaunchError> {
    let start = Instant::now();
    let listener = listen(store_host, port, me, timeout)?;
    let mut conns: Vec<Conn> = Vec::new();
    // The host of every rank that said hello, while its connection lasts.
    let mut hosts: Vec<Option<String>> = vec![None; me.ranks];
    hosts[0] = Some(me.host.clone());
    let mut verdict: Option<Result<(), LaunchError>> = None;
    let mut told = vec![false; me.ranks];
    told[0] = true;
    loop {
        accept_all(&listener, &mut conns);
        for c in conns.iter_mut() {
            match c.poll() {
                Poll::Nothing => {}
                Poll::Gone => {
                    // A rank that left before the verdict is missing again.
                    if let (Some(h), None) = (c.hello.take(), &verdict) {
                        hosts[h.rank] = None;
                    }
                }
                Poll::Hello(h) if verdict.is_some() => c.hello = Some(h),
                Poll::Hello(h) => match check(me, &hosts, &h) {
                    Ok(()) => {
                        hosts[h.rank] = Some(h.host.clone());
                        c.hello = Some(h);
                    }
                    Err(e) => {
                        c.hello = Some(h);
                        verdict = Some(Err(e));
                    }
                },
                Poll::Failed(e) => {
                    c.answer_anyway = true;
                    verdict = verdict.or(Some(Err(e)));
                }
            }
        }
        if verdict.is_none() && hosts.iter().all(Option::is_some) {
            verdict = Some(Ok(()));
        }
        if verdict.is_none() && start.elapsed() >= timeout {
            verdict = Some(Err(LaunchError::Timeout {
                ranks: me.ranks,
                missing: (0..me.ranks).filter(|&r| hosts[r].is_none()).collect(),
                waited: timeout,
            }));
        }
        if let Some(v) = &verdict {
            let answer = match v {
                Ok(()) => frame(WELCOME, &Enc::default().str(id).0),
                Err(e) => frame(REFUSED, &encode_error(e)),
            };
            for c in conns.iter_mut().filter(|c| !c.gone) {
                if let Some(t) = c.answer(&answer).and_then(|rank| told.get_mut(rank)) {
                    *t = true;
                }
            }
            if v.is_ok() || told.iter().all(|&t| t) || start.elapsed() >= timeout {
                return verdict.expect("decided");
            }
        }
        conns.retain(|c| !c.gone);
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Every other rank: reach rank 0's store at `host:port` (retrying until the timeout), say
/// hello, and return the id rank 0 answers with — or its error.
pub(crate) fn fetch(
    host: &str,
    port: u16,
    me: &Hello,
    timeout: Duration,
) -> Result<String, LaunchError> {
    let start = Instant::now();
    let mut stream = connect(host, port, start, timeout)?;
    let _ = stream.set_nodelay(true);
    let hello = Enc::default()
        .u64(me.rank as u64)
        .u64(me.ranks as u64)
        .str(&me.backend)
        .str(&me.host)
        .0;
    let broke = |e: std::io::Error| {
        LaunchError::Protocol(format!(
            "the connection to rank 0's store at {host}:{port} broke: {e}"
        ))
    };
    stream.write_all(&frame(HELLO, &hello)).map_err(broke)?;
    let until = start + timeout + VERDICT_GRACE.min(timeout);
    let mut buf = Vec::new();
    loop {
        if let Some((kind, payload)) = parse(&buf).map_err(|e| stranger(host, port, e))? {
            let mut d = Dec(&payload);
            return match kind {
                WELCOME => d.str().map_err(|e| stranger(host, port, e)),
                REFUSED => Err(decode_error(&mut d).map_err(|e| stranger(host, port, e))?),
                k => Err(stranger(host, port, format!("a frame of kind {k}"))),
            };
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(LaunchError::Timeout {
                ranks: me.ranks,
                missing: Vec::new(),
                waited: start.elapsed(),
            });
        }
        stream.set_read_timeout(Some(left)).map_err(broke)?;
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk) {
            Ok(0) => {
                return Err(LaunchError::Protocol(format!(
                    "rank 0's store at {host}:{port} closed the connection without an answer \
                     (did rank 0 exit?)"
                )))
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(broke(e)),
        }
    }
}

/// Check a rank's hello against rank 0's view: `hosts[r]` is the host of rank `r`, once it
/// said hello.
fn check(me: &Hello, hosts: &[Option<String>], h: &Hello) -> Result<(), LaunchError> {
    if h.ranks != me.ranks {
        return Err(LaunchError::WorldSizeMismatch {
            rank: h.rank,
            theirs: h.ranks,
            ours: me.ranks,
        });
    }
    if h.rank >= me.ranks {
        return Err(LaunchError::RankOutOfRange {
            rank: h.rank,
            ranks: me.ranks,
        });
    }
    if let Some(first) = &hosts[h.rank] {
        return Err(LaunchError::DuplicateRank {
            rank: h.rank,
            first: first.clone(),
            second: h.host.clone(),
        });
    }
    if h.backend != me.backend {
        return Err(LaunchError::BackendMismatch {
            rank: h.rank,
            theirs: h.backend.clone(),
            ours: me.backend.clone(),
        });
    }
    if me.backend == "host" && h.host != me.host {
        return Err(LaunchError::NotLocal(format!(
            "rank {} runs on {}, rank 0 on {}",
            h.rank, h.host, me.host
        )));
    }
    Ok(())
}

/// Rank 0's listener. A port in use may be held by another process claiming rank 0: it is
/// asked, as a rank 0 saying hello, so that both learn of the duplicate.
fn listen(
    store_host: &str,
    port: u16,
    me: &Hello,
    timeout: Duration,
) -> Result<TcpListener, LaunchError> {
    let v6_only = (store_host, port)
        .to_socket_addrs()
        .map(|mut a| a.all(|a| a.is_ipv6()))
        .unwrap_or(false);
    let any: SocketAddr = if v6_only {
        (Ipv6Addr::UNSPECIFIED, port).into()
    } else {
        (Ipv4Addr::UNSPECIFIED, port).into()
    };
    let listener = match TcpListener::bind(any) {
        Ok(l) => l,
        Err(e) if e.kind() == ErrorKind::AddrInUse => {
            let local = if v6_only { "::1" } else { "127.0.0.1" };
            let probe = fetch(local, port, me, timeout.min(Duration::from_secs(2)));
            return Err(match probe {
                Err(dup @ LaunchError::DuplicateRank { .. }) => dup,
                _ => LaunchError::StoreBind {
                    addr: any.to_string(),
                    why: format!(
                        "{e} (another program holds the port: set CUEFLOW_STORE_PORT, or another MASTER_PORT)"
                    ),
                },
            });
        }
        Err(e) => {
            return Err(LaunchError::StoreBind {
                addr: any.to_string(),
                why: e.to_string(),
            })
        }
    };
    listener
        .set_nonblocking(true)
        .map_err(|e| LaunchError::StoreBind {
            addr: any.to_string(),
            why: e.to_string(),
        })?;
    Ok(listener)
}

/// Connect to `host:port`, retrying (with a growing pause) until the timeout; the host is
/// resolved again on every try (a cluster's names can appear late).
fn connect(
    host: &str,
    port: u16,
    start: Instant,
    timeout: Duration,
) -> Result<TcpStream, LaunchError> {
    let mut pause = Duration::from_millis(10);
    let mut why = String::from("not tried");
    loop {
        match (host, port).to_socket_addrs() {
            Ok(addrs) => {
                let mut addrs: Vec<SocketAddr> = addrs.collect();
                addrs.sort_by_key(SocketAddr::is_ipv6);
                for a in addrs {
                    let left = timeout.saturating_sub(start.elapsed());
                    let try_for = left.clamp(Duration::from_millis(1), Duration::from_secs(2));
                    match TcpStream::connect_timeout(&a, try_for) {
                        Ok(s) => return Ok(s),
                        Err(e) => why = format!("{a}: {e}"),
                    }
                }
            }
            Err(e) => why = format!("cannot resolve {host}: {e}"),
        }
        let left = timeout.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Err(LaunchError::StoreUnreachable {
                addr: format!("{host}:{port}"),
                waited: start.elapsed(),
                why,
            });
        }
        std::thread::sleep(pause.min(left));
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}

fn stranger(host: &str, port: u16, what: String) -> LaunchError {
    LaunchError::Protocol(format!(
        "{host}:{port} does not answer as cueflow's store ({what}); is another program \
         listening at MASTER_PORT?"
    ))
}

/// Take every connection waiting at the listener.
fn accept_all(listener: &TcpListener, conns: &mut Vec<Conn>) {
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                if stream.set_nonblocking(true).is_ok() {
                    conns.push(Conn {
                        stream,
                        buf: Vec::new(),
                        hello: None,
                        gone: false,
                        answer_anyway: false,
                    });
                }
            }
            // WouldBlock: no one else is waiting; other errors concern one connection.
            Err(e) if e.kind() == ErrorKind::WouldBlock => return,
            Err(_) => return,
        }
    }
}

/// A connection to rank 0, with what it sent so far and the hello once it came.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    hello: Option<Hello>,
    /// Answered (once), or closed.
    gone: bool,
    /// It spoke another version: it gets the verdict without a hello.
    answer_anyway: bool,
}

enum Poll {
    Nothing,
    Gone,
    Hello(Hello),
    Failed(LaunchError),
}

impl Conn {
    /// Read what arrived: a hello (once), the connection closing, or nothing new.
    fn poll(&mut self) -> Poll {
        let mut chunk = [0u8; 4096];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    self.gone = true;
                    return Poll::Gone;
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    self.gone = true;
                    return Poll::Gone;
                }
            }
        }
        if self.hello.is_some() {
            return Poll::Nothing;
        }
        match parse(&self.buf) {
            Ok(None) => Poll::Nothing,
            Ok(Some((HELLO, payload))) => {
                let mut d = Dec(&payload);
                let hello = (|| {
                    Ok::<_, String>(Hello {
                        rank: d.u64()? as usize,
                        ranks: d.u64()? as usize,
                        backend: d.str()?,
                        host: d.str()?,
                    })
                })();
                match hello {
                    Ok(h) => Poll::Hello(h),
                    Err(_) => self.drop_stranger(),
                }
            }
            Ok(Some(_)) => self.drop_stranger(),
            Err(e) if e.starts_with(VERSION_MISMATCH) => Poll::Failed(LaunchError::Protocol(e)),
            Err(_) => self.drop_stranger(),
        }
    }

    /// Send the verdict to a rank that said hello (or spoke another version), once, and
    /// close; returns the rank told.
    fn answer(&mut self, answer: &[u8]) -> Option<usize> {
        if self.hello.is_none() && !self.answer_anyway {
            return None;
        }
        let _ = self.stream.set_nonblocking(false);
        let _ = self.stream.set_write_timeout(Some(Duration::from_secs(5)));
        let _ = self.stream.write_all(answer);
        self.gone = true;
        self.hello.as_ref().map(|h| h.rank)
    }

    fn drop_stranger(&mut self) -> Poll {
        self.gone = true;
        Poll::Gone
    }
}

const VERSION_MISMATCH: &str = "a rank speaks version";

/// A frame of `kind` around `payload`.
fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(HEADER + payload.len());
    f.extend_from_slice(MAGIC);
    f.push(VERSION);
    f.push(kind);
    f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// The first frame of `buf` once it is whole (`None` before), or why `buf` holds none.
fn parse(buf: &[u8]) -> Result<Option<(u8, Vec<u8>)>, String> {
    let have = buf.len().min(MAGIC.len());
    if buf[..have] != MAGIC[..have] {
        return Err("no CFST frame".into());
    }
    if buf.len() < HEADER {
        return Ok(None);
    }
    if buf[4] != VERSION {
        return Err(format!(
            "{VERSION_MISMATCH} {} of the store protocol, this one {VERSION} (every rank must \
             run the same cueflow)",
            buf[4]
        ));
    }
    let len = u32::from_be_bytes([buf[6], buf[7], buf[8], buf[9]]) as usize;
    if len > MAX_PAYLOAD {
        return Err(format!("a frame of {len} bytes"));
    }
    Ok((buf.len() >= HEADER + len).then(|| (buf[5], buf[HEADER..HEADER + len].to_vec())))
}

/// Errors travel from rank 0 to the other ranks as a code and the variant's fields.
fn encode_error(e: &LaunchError) -> Vec<u8> {
    let n = |x: usize| x as u64;
    let e = match e {
        LaunchError::Timeout {
            ranks,
            missing,
            waited,
        } => {
            let mut enc = Enc::default()
                .u8(1)
                .u64(n(*ranks))
                .u64(waited.as_millis() as u64)
                .u64(n(missing.len()));
            for &m in missing {
                enc = enc.u64(n(m));
            }
            enc
        }
        LaunchError::WorldSizeMismatch { rank, theirs, ours } => Enc::default()
            .u8(2)
            .u64(n(*rank))
            .u64(n(*theirs))
            .u64(n(*ours)),
        LaunchError::DuplicateRank {
            rank,
            first,
            second,
        } => Enc::default().u8(3).u64(n(*rank)).str(first).str(second),
        LaunchError::RankOutOfRange { rank, ranks } => {
            Enc::default().u8(4).u64(n(*rank)).u64(n(*ranks))
        }
        LaunchError::BackendMismatch { rank, theirs, ours } => {
            Enc::default().u8(5).u64(n(*rank)).str(theirs).str(ours)
        }
        LaunchError::NotLocal(why) => Enc::default().u8(6).str(why),
        LaunchError::Protocol(why) => Enc::default().u8(7).str(why),
        other => Enc::default().u8(0).str(&other.to_string()),
    };
    e.0
}

fn decode_error(d: &mut Dec<'_>) -> Result<LaunchError, String> {
    let us = |d: &mut Dec<'_>| d.u64().map(|x| x as usize);
    Ok(match d.u8()? {
        1 => {
            let ranks = us(d)?;
            let waited = Duration::from_millis(d.u64()?);
            let count = us(d)?.min(ranks);
            let missing = (0..count).map(|_| us(d)).collect::<Result<_, _>>()?;
            LaunchError::Timeout {
                ranks,
                missing,
                waited,
            }
        }
        2 => LaunchError::WorldSizeMismatch {
            rank: us(d)?,
            theirs: us(d)?,
            ours: us(d)?,
        },
        3 => LaunchError::DuplicateRank {
            rank: us(d)?,
            first: d.str()?,
            second: d.str()?,
        },
        4 => LaunchError::RankOutOfRange {
            rank: us(d)?,
            ranks: us(d)?,
        },
        5 => LaunchError::BackendMismatch {
            rank: us(d)?,
            theirs: d.str()?,
            ours: d.str()?,
        },
        6 => LaunchError::NotLocal(d.str()?),
        7 => LaunchError::Protocol(d.str()?),
        _ => LaunchError::Aborted(d.str()?),
    })
}

#[derive(Default)]
struct Enc(Vec<u8>);

impl Enc {
    fn u8(mut self, x: u8) -> Self {
        self.0.push(x);
        self
    }
    fn u64(mut self, x: u64) -> Self {
        self.0.extend_from_slice(&x.to_be_bytes());
        self
    }
    fn str(mut self, s: &str) -> Self {
        let b = &s.as_bytes()[..s.len().min(u16::MAX as usize)];
        self.0.extend_from_slice(&(b.len() as u16).to_be_bytes());
        self.0.extend_from_slice(b);
        self
    }
}

struct Dec<'a>(&'a [u8]);

impl Dec<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        if self.0.len() < n {
            return Err("a frame shorter than its fields".into());
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_be_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn str(&mut self) -> Result<String, String> {
        let len = u16::from_be_bytes(self.take(2)?.try_into().expect("2 bytes")) as usize;
        String::from_utf8(self.take(len)?.to_vec()).map_err(|_| "a name that is not UTF-8".into())
    }
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
