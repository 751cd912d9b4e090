//! Jobs started by the tools clusters use (SPEC MD5): [`LaunchEnv`] reads what torchrun,
//! Slurm's `srun` or Open MPI's `mpirun` set in the environment, and the ranks meet through a
//! small TCP store at rank 0 (`store`), which hands every rank the communicator's id.
//! [`Communicator::from_env`](crate::Communicator::from_env) and
//! [`Device::from_local_rank`](crate::Device::from_local_rank) build on them; see
//! `docs/clusters.md` for launching.

pub(crate) mod env;
pub(crate) mod error;
mod nodelist;
pub(crate) mod store;

pub use env::{LaunchEnv, Launcher};
pub use error::LaunchError;

use std::net::{ToSocketAddrs, UdpSocket};

/// This machine's host name (`gethostname`), or `localhost` when it has none.
pub(crate) fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is writable for its length; gethostname writes at most that many bytes.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match (r, std::str::from_utf8(&buf[..end])) {
        (0, Ok(name)) if !name.is_empty() => name.to_string(),
        _ => "localhost".to_string(),
    }
}

/// Whether `host` names this machine: it resolves to a loopback address or to an address
/// of one of this machine's interfaces (one a socket can bind to). `Err`: it does not
/// resolve.
pub(crate) fn names_this_machine(host: &str) -> Result<bool, String> {
    let addrs: Vec<_> = (host, 0)
        .to_socket_addrs()
        .map_err(|e| format!("{host} does not resolve: {e}"))?
        .collect();
    Ok(addrs
        .iter()
        .any(|a| a.ip().is_loopback() || UdpSocket::bind((a.ip(), 0)).is_ok()))
}

/// The id every rank of `env`'s job joins under: rank 0 makes it (`make_id`) and hands it
/// out through its store; the others fetch it. `backend` is this rank's device's backend.
pub(crate) fn exchange_id(
    env: &LaunchEnv,
    backend: &str,
    make_id: impl FnOnce() -> crate::error::Result<String>,
) -> crate::error::Result<String> {
    if env.ranks() == 1 {
        return make_id();
    }
    let me = store::Hello {
        rank: env.rank(),
        ranks: env.ranks(),
        backend: backend.to_string(),
        host: hostname(),
    };
    let (host, port, timeout) = (env.store_host(), env.store_port(), env.timeout());
    if env.rank() == 0 {
        let id = make_id()?;
        store::serve(host, port, &me, &id, timeout)?;
        Ok(id)
    } else {
        Ok(store::fetch(host, port, &me, timeout)?)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_machine_is_named_by_loopback_and_by_its_name() {
        assert_eq!(super::names_this_machine("127.0.0.1"), Ok(true));
        assert_eq!(super::names_this_machine("localhost"), Ok(true));
        // TEST-NET-1 (RFC 5737) is never an interface's address.
        assert_eq!(super::names_this_machine("192.0.2.1"), Ok(false));
    }
}
